//! The committed offset of a group on one partition: what both group-offset clients
//! (`group_client`'s own connections and librdkafka's admin calls) read and commit.

/// A committed group offset for one partition (or one to commit).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct GroupOffset {
    /// Topic name.
    pub topic: String,
    /// Partition.
    pub partition: i32,
    /// Committed offset (the next record the group reads).
    pub offset: i64,
    /// Commit metadata.
    pub metadata: String,
}

// MirrorMaker 2's own client code (connect-mirror, connect-mirror-client) run by
// tests/mm2_compat.rs on what mirrorflow and MM2 wrote. One line per fact on stdout, fields
// separated by spaces (topic and group names hold none); logs go to stderr.
//
//   translate BOOTSTRAP REMOTE_ALIAS GROUP...  RemoteClusterUtils.translateOffsets, per group:
//                                              "offset GROUP TOPIC PARTITION OFFSET [METADATA]"
//   client BOOTSTRAP ALIAS...                  MirrorClient: "heartbeatTopics T,...",
//                                              "upstreamClusters A,...", "checkpointTopics T,...",
//                                              "replicationHops ALIAS N" per alias
//   heartbeats BOOTSTRAP TOPIC                 Heartbeat.deserializeRecord of every record:
//                                              "heartbeat PARTITION OFFSET SOURCE TARGET TIMESTAMP"
//   syncs BOOTSTRAP TOPIC                      OffsetSync.deserializeRecord of every record:
//                                              "sync OFFSET TOPIC PARTITION UPSTREAM DOWNSTREAM"

import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.TreeSet;
import java.util.function.Function;
import java.util.stream.Collectors;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.connect.mirror.Heartbeat;
import org.apache.kafka.connect.mirror.MirrorClient;
import org.apache.kafka.connect.mirror.OffsetSync;
import org.apache.kafka.connect.mirror.RemoteClusterUtils;

public class Mm2Compat {
    private static final Duration TIMEOUT = Duration.ofSeconds(30);

    public static void main(String[] args) throws Exception {
        if (args.length < 2) {
            throw new IllegalArgumentException("usage: COMMAND BOOTSTRAP ...");
        }
        Map<String, Object> props = Map.of("bootstrap.servers", args[1]);
        List<String> rest = Arrays.asList(args).subList(2, args.length);
        switch (args[0]) {
            case "translate" -> {
                String remote = rest.get(0);
                for (String group : rest.subList(1, rest.size())) {
                    Map<TopicPartition, OffsetAndMetadata> offsets =
                        RemoteClusterUtils.translateOffsets(props, remote, group, TIMEOUT);
                    offsets.entrySet().stream()
                        .sorted(Map.Entry.comparingByKey(
                            (a, b) -> a.topic().equals(b.topic())
                                ? Integer.compare(a.partition(), b.partition())
                                : a.topic().compareTo(b.topic())))
                        .forEach(e -> System.out.printf("offset %s %s %d %d [%s]%n", group,
                            e.getKey().topic(), e.getKey().partition(), e.getValue().offset(),
                            e.getValue().metadata()));
                }
            }
            case "client" -> {
                try (MirrorClient client = new MirrorClient(props)) {
                    System.out.println("heartbeatTopics " + String.join(",", new TreeSet<>(client.heartbeatTopics())));
                    System.out.println("upstreamClusters " + String.join(",", new TreeSet<>(client.upstreamClusters())));
                    System.out.println("checkpointTopics " + String.join(",", new TreeSet<>(client.checkpointTopics())));
                    for (String alias : rest) {
                        System.out.printf("replicationHops %s %d%n", alias, client.replicationHops(alias));
                    }
                }
            }
            case "heartbeats" -> readAll(args[1], rest.get(0), record -> {
                Heartbeat h = Heartbeat.deserializeRecord(record);
                return String.format("heartbeat %d %d %s %s %d", record.partition(), record.offset(),
                    h.sourceClusterAlias(), h.targetClusterAlias(), h.timestamp());
            });
            case "syncs" -> readAll(args[1], rest.get(0), record -> {
                OffsetSync s = OffsetSync.deserializeRecord(record);
                return String.format("sync %d %s %d %d %d", record.offset(), s.topicPartition().topic(),
                    s.topicPartition().partition(), s.upstreamOffset(), s.downstreamOffset());
            });
            default -> throw new IllegalArgumentException("unknown command " + args[0]);
        }
    }

    /// Every record of every partition of `topic`, as it is now, each printed as `show` says.
    /// read_committed, as mirrorflow's side of each comparison reads (MM2's own stores read
    /// uncommitted: a Java consumer's default).
    private static void readAll(String bootstrap, String topic,
                                Function<ConsumerRecord<byte[], byte[]>, String> show) {
        Map<String, Object> config = Map.of(
            ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap,
            ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, false,
            ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
        try (KafkaConsumer<byte[], byte[]> consumer =
                 new KafkaConsumer<>(config, new ByteArrayDeserializer(), new ByteArrayDeserializer())) {
            List<TopicPartition> partitions = consumer.partitionsFor(topic, TIMEOUT).stream()
                .map(p -> new TopicPartition(topic, p.partition()))
                .collect(Collectors.toList());
            consumer.assign(partitions);
            consumer.seekToBeginning(partitions);
            Map<TopicPartition, Long> ends = consumer.endOffsets(partitions, TIMEOUT);
            long deadline = System.currentTimeMillis() + TIMEOUT.toMillis();
            List<String> lines = new ArrayList<>();
            while (partitions.stream().anyMatch(p -> consumer.position(p) < ends.get(p))) {
                if (System.currentTimeMillis() > deadline) {
                    throw new IllegalStateException("reading " + topic + " took longer than " + TIMEOUT);
                }
                for (ConsumerRecord<byte[], byte[]> record : consumer.poll(Duration.ofMillis(200))) {
                    lines.add(show.apply(record));
                }
            }
            lines.forEach(System.out::println);
        }
    }
}

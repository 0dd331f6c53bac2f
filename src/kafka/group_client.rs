//! Many-group offset calls on connections of our own (the requests of `kafka::protocol`,
//! over `kafka::transport`: plaintext or TLS, SASL PLAIN or SCRAM): FindCoordinator v4 for
//! every group whose coordinator is not cached, then OffsetFetch v8 with up to
//! [`MAX_GROUPS_PER_FETCH`] groups per request, or one OffsetCommit v8 per group, pipelined,
//! spread over up to [`MAX_LANES`] connections per coordinator (a broker serves one
//! connection's requests in order). Blocking (run on tokio's blocking pool); each call ends
//! by its deadline (the client's timeout from the call's start).
//!
//! Clusters whose settings the transport does not serve (GSSAPI, OAUTHBEARER, encrypted keys)
//! keep librdkafka's one-group-per-request calls, as does a broker older than Kafka 3.0
//! (FindCoordinator v4 and OffsetFetch v8), which [`Unavailable`] reports to the caller.

use std::collections::HashMap;
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::Mutex;
use std::time::Duration;

use rdkafka::ClientConfig;

use super::error::{Code, Error};
use super::group_offset::GroupOffset;
use super::protocol::{
    self as p, code_text, is_reroute, Coordinator, FetchOutcome, API_VERSIONS, FIND_COORDINATOR,
    FIND_COORDINATOR_VERSION, MAX_GROUPS_PER_FETCH, OFFSET_COMMIT, OFFSET_COMMIT_VERSION,
    OFFSET_FETCH, OFFSET_FETCH_VERSION, SASL_AUTHENTICATE, SASL_AUTHENTICATE_VERSION,
    SASL_HANDSHAKE, SASL_HANDSHAKE_VERSION,
};
use super::scram;
use super::transport::{Deadline, Sasl, Security, Stream};

/// Rounds of a call: a group whose coordinator moved is looked up and asked again.
const ROUNDS: usize = 3;
/// Largest response accepted (a fetch answer of 1000 groups is far below).
const MAX_RESPONSE_BYTES: usize = 256 << 20;
/// Connections per coordinator a call's requests are spread over.
pub const MAX_LANES: usize = 4;
/// Commits per extra connection: a handful of groups is not worth a connection.
const COMMITS_PER_LANE: usize = 256;

/// How a call's requests are spread over connections per coordinator; the production
/// values are [`Lanes::default`] (tests lower them to reach several connections with few
/// groups).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lanes {
    /// Connections per coordinator at most.
    pub max: usize,
    /// Commits per connection before another one is opened.
    pub commits_per_lane: usize,
    /// Groups per OffsetFetch request (each request is worth a connection of its own).
    pub groups_per_fetch: usize,
}

impl Default for Lanes {
    fn default() -> Self {
        Self {
            max: MAX_LANES,
            commits_per_lane: COMMITS_PER_LANE,
            groups_per_fetch: MAX_GROUPS_PER_FETCH,
        }
    }
}

impl Lanes {
    /// Connections to use for `requests` requests when each connection should carry at
    /// least `per_lane` of them: between 1 and `max`.
    pub fn lanes_for(&self, requests: usize, per_lane: usize) -> usize {
        (requests / per_lane.max(1)).clamp(1, self.max.max(1))
    }
}

/// This path cannot serve the call; use librdkafka's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unavailable(pub String);

struct Conn {
    stream: Stream,
    versions: HashMap<i16, i16>,
}

#[derive(Default)]
struct State {
    /// By (address, lane).
    conns: HashMap<(String, usize), Conn>,
    coordinators: HashMap<String, Coordinator>,
    correlation: i32,
    /// The running call's deadline.
    deadline: Option<Deadline>,
    /// Set once a broker lacks the versions: the path stays off for this client.
    unsupported: Option<String>,
}

impl State {
    /// Reserves `n` correlation ids; the first of them.
    fn ids(&mut self, n: usize) -> i32 {
        let first = self.correlation;
        self.correlation = first.wrapping_add(n as i32);
        first
    }
}

/// One cluster's many-group client.
pub struct GroupClient {
    bootstrap: Vec<String>,
    security: Security,
    client_id: String,
    timeout: Duration,
    lanes: Lanes,
    state: Mutex<State>,
}

/// One lane's end: its number, its connection, how many requests it carried, the answers.
type LaneDone = (usize, Conn, usize, Result<Vec<Vec<u8>>, Error>);

/// What one group's request produced.
enum Answer<T> {
    Done(Result<T, Error>),
    Reroute(Error),
}

impl GroupClient {
    /// A client for the cluster of `config`, or `None` when the transport does not serve its
    /// settings (logged with the reason) or it has no bootstrap servers.
    pub fn for_config(config: &ClientConfig, timeout: Duration, lanes: Lanes) -> Option<Self> {
        let security = match Security::from_config(config) {
            Ok(s) => s,
            Err(why) => {
                tracing::info!(reason = %why, "group offsets: one request per group (librdkafka)");
                return None;
            }
        };
        let bootstrap: Vec<String> = config
            .get("bootstrap.servers")?
            .split(',')
            .map(|s| s.trim())
            .map(|s| s.rsplit_once("://").map_or(s, |(_, a)| a).to_string())
            .filter(|s| !s.is_empty())
            .collect();
        (!bootstrap.is_empty()).then(|| Self {
            bootstrap,
            security,
            client_id: config.get("client.id").unwrap_or("mirrorflow").to_string(),
            timeout,
            lanes,
            state: Mutex::new(State::default()),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Committed offsets of each group (partitions without a commit left out), in input
    /// order, as `GroupAdmin::list_offsets` reports them.
    pub fn list_offsets(
        &self,
        groups: &[String],
    ) -> Result<Vec<Result<Vec<GroupOffset>, Error>>, Unavailable> {
        let mut st = self.lock();
        self.many(
            &mut st,
            groups,
            self.lanes.groups_per_fetch,
            |st, coord, batches| {
                let bodies: Vec<Vec<u8>> =
                    batches.iter().map(|b| p::offset_fetch_body(b)).collect();
                let lanes = self.lanes.lanes_for(bodies.len(), 1);
                let answers = self.call(
                    st,
                    coord,
                    OFFSET_FETCH,
                    OFFSET_FETCH_VERSION,
                    &bodies,
                    lanes,
                )?;
                let mut out = HashMap::new();
                for (chunk, body) in batches.iter().zip(answers) {
                    let body = match body {
                        Ok(b) => b,
                        Err(e) => {
                            // Its connection failed: look the coordinator up again.
                            for g in chunk {
                                out.insert(g.clone(), Answer::Reroute(e.clone()));
                            }
                            continue;
                        }
                    };
                    let decoded = p::decode_offset_fetch(&body).map_err(Error::from);
                    let by_group: HashMap<&str, &p::FetchedGroup> = match &decoded {
                        Ok(d) => d.iter().map(|g| (g.group.as_str(), g)).collect(),
                        Err(_) => HashMap::new(),
                    };
                    for g in chunk {
                        let answer = match &decoded {
                            Err(e) => Answer::Done(Err(e.clone())),
                            Ok(_) => match p::fetch_outcome(g, by_group.get(g.as_str()).copied()) {
                                FetchOutcome::Offsets(o) => Answer::Done(Ok(o)),
                                FetchOutcome::Reroute(e) => Answer::Reroute(e),
                                FetchOutcome::Failed(e) => Answer::Done(Err(e)),
                            },
                        };
                        out.insert(g.clone(), answer);
                    }
                }
                Ok(out)
            },
        )
        .map(|r| self.name_errors(groups, r, "list consumer group offsets"))
    }

    /// Commits offsets to groups (one OffsetCommit v8 per group with generation -1, which
    /// the broker refuses for a group with active members). One result per input, in
    /// order; a group succeeds only if every partition did.
    pub fn commit_offsets(
        &self,
        commits: &[(String, Vec<GroupOffset>)],
    ) -> Result<Vec<Result<(), Error>>, Unavailable> {
        let offsets: HashMap<&str, &[GroupOffset]> = commits
            .iter()
            .map(|(g, o)| (g.as_str(), o.as_slice()))
            .collect();
        let groups: Vec<String> = commits.iter().map(|(g, _)| g.clone()).collect();
        let mut st = self.lock();
        // One group per OffsetCommit request: the API has no list of groups.
        self.many(&mut st, &groups, 1, |st, coord, batches| {
            let batch: Vec<&String> = batches.iter().flatten().collect();
            let bodies: Vec<Vec<u8>> = batch
                .iter()
                .map(|g| p::offset_commit_body(g, offsets[g.as_str()]))
                .collect();
            let lanes = self
                .lanes
                .lanes_for(bodies.len(), self.lanes.commits_per_lane);
            let answers = self.call(
                st,
                coord,
                OFFSET_COMMIT,
                OFFSET_COMMIT_VERSION,
                &bodies,
                lanes,
            )?;
            let mut out = HashMap::new();
            for (g, body) in batch.into_iter().zip(answers) {
                let body = match body {
                    Ok(b) => b,
                    Err(e) => {
                        out.insert(g.clone(), Answer::Reroute(e));
                        continue;
                    }
                };
                let answer = match p::decode_offset_commit(&body) {
                    Err(e) => Answer::Done(Err(e.into())),
                    Ok(parts) => match p::commit_outcome(offsets[g.as_str()], &parts) {
                        FetchOutcome::Offsets(_) => Answer::Done(Ok(())),
                        FetchOutcome::Reroute(e) => Answer::Reroute(e),
                        FetchOutcome::Failed(e) => Answer::Done(Err(e)),
                    },
                };
                out.insert(g.clone(), answer);
            }
            Ok(out)
        })
        .map(|r| self.name_errors(&groups, r, "commit consumer group offsets"))
    }

    fn name_errors<T>(
        &self,
        groups: &[String],
        results: Vec<Result<T, Error>>,
        what: &str,
    ) -> Vec<Result<T, Error>> {
        groups
            .iter()
            .zip(results)
            .map(|(g, r)| r.map_err(|e| e.context(format!("group {g:?}")).context(what)))
            .collect()
    }

    /// Routes `groups` to their coordinators (looking up the unknown ones) and runs `send`
    /// per coordinator with its groups in requests of `per_request`, for up to [`ROUNDS`]
    /// rounds while some answer says the coordinator moved. Results in input order.
    fn many<T>(
        &self,
        st: &mut State,
        groups: &[String],
        per_request: usize,
        send: impl Fn(
            &mut State,
            &Coordinator,
            &[Vec<String>],
        ) -> Result<HashMap<String, Answer<T>>, Unavailable>,
    ) -> Result<Vec<Result<T, Error>>, Unavailable> {
        if let Some(why) = &st.unsupported {
            return Err(Unavailable(why.clone()));
        }
        let deadline = Deadline::after(self.timeout);
        st.deadline = Some(deadline);
        let mut done: HashMap<String, Result<T, Error>> = HashMap::new();
        let mut last_error: HashMap<String, Error> = HashMap::new();
        for round in 0..ROUNDS {
            let pending: Vec<&str> = groups
                .iter()
                .map(String::as_str)
                .filter(|g| !done.contains_key(*g))
                .collect();
            if pending.is_empty() {
                break;
            }
            if round > 0 {
                let pause = Duration::from_millis(200 * round as u64);
                if deadline.left() <= pause {
                    for g in pending {
                        last_error.insert(g.to_string(), deadline.timeout());
                    }
                    break;
                }
                std::thread::sleep(pause);
            }
            let plan = p::plan_round(&pending, &st.coordinators, per_request);
            for keys in &plan.find {
                for (key, answer) in self.find_coordinators(st, keys)? {
                    match answer {
                        Ok(c) => {
                            st.coordinators.insert(key, c);
                        }
                        Err((code, msg)) if is_reroute(code) => {
                            last_error.insert(key, Error::code(Code(i32::from(code)), msg));
                        }
                        Err((code, msg)) => {
                            let text = format!("{msg} ({})", code_text(code));
                            done.insert(
                                key,
                                Err(Error::code(Code(i32::from(code)), text)
                                    .context("find coordinator")),
                            );
                        }
                    }
                }
            }
            // Groups just looked up are sent in this same round.
            let plan = p::plan_round(
                &pending
                    .iter()
                    .copied()
                    .filter(|g| !done.contains_key(*g))
                    .collect::<Vec<_>>(),
                &st.coordinators,
                per_request,
            );
            for (coord, batches) in plan.send {
                let answered = send(st, &coord, &batches);
                let batch: Vec<String> = batches.into_iter().flatten().collect();
                match answered {
                    Ok(answers) => {
                        for g in batch {
                            match answers.get(&g) {
                                None => {
                                    last_error.insert(g, no_answer());
                                }
                                Some(Answer::Reroute(e)) => {
                                    st.coordinators.remove(&g);
                                    last_error.insert(g, e.clone());
                                }
                                Some(Answer::Done(_)) => {}
                            }
                        }
                        for (g, a) in answers {
                            if let Answer::Done(r) = a {
                                done.insert(g, r);
                            }
                        }
                    }
                    Err(Unavailable(e)) => {
                        if st.unsupported.is_some() {
                            return Err(Unavailable(e));
                        }
                        // The coordinator's connection failed: look its groups up again.
                        for g in batch {
                            st.coordinators.remove(&g);
                            last_error.insert(g, Error::Client(e.clone()));
                        }
                    }
                }
            }
        }
        Ok(groups
            .iter()
            .map(|g| match done.remove(g) {
                Some(r) => r,
                None => Err(last_error.remove(g).unwrap_or_else(no_answer)),
            })
            .collect())
    }

    /// FindCoordinator v4 on the first bootstrap broker that answers. `Unavailable` when none
    /// does or the broker lacks v4.
    fn find_coordinators(
        &self,
        st: &mut State,
        keys: &[String],
    ) -> Result<Vec<(String, p::Found)>, Unavailable> {
        let body = p::find_coordinator_body(keys);
        let mut last = String::from("no bootstrap server");
        for addr in &self.bootstrap {
            match self.call_addr(
                st,
                addr,
                0,
                FIND_COORDINATOR,
                FIND_COORDINATOR_VERSION,
                std::slice::from_ref(&body),
            ) {
                Ok(mut answers) => {
                    let body = answers.pop().unwrap_or_default();
                    return p::decode_find_coordinator(&body)
                        .map_err(|e| Unavailable(e.to_string()));
                }
                Err(e) if st.unsupported.is_some() => return Err(e),
                Err(Unavailable(e)) => last = e,
            }
        }
        Err(Unavailable(last))
    }

    /// Sends `bodies` to the coordinator over up to `lanes` connections, each lane a
    /// contiguous share pipelined on its own connection, the lanes in parallel. One answer
    /// per body, in order; `Err` for the bodies of a lane whose connection failed (the others
    /// stand). `Unavailable` when no connection works or the broker lacks the version.
    fn call(
        &self,
        st: &mut State,
        coord: &Coordinator,
        api_key: i16,
        version: i16,
        bodies: &[Vec<u8>],
        lanes: usize,
    ) -> Result<Vec<Result<Vec<u8>, Error>>, Unavailable> {
        let addr = format!("{}:{}", coord.host, coord.port);
        let lanes = lanes.clamp(1, bodies.len().max(1));
        if lanes == 1 {
            return Ok(self
                .call_addr(st, &addr, 0, api_key, version, bodies)?
                .into_iter()
                .map(Ok)
                .collect());
        }
        // Lane 0 decides availability (versions); extra lanes that fail to open are skipped.
        self.ensure_conn(st, &addr, 0, api_key, version)?;
        let mut conns: Vec<(usize, Conn)> = Vec::with_capacity(lanes);
        for lane in 0..lanes {
            if lane > 0 && self.ensure_conn(st, &addr, lane, api_key, version).is_err() {
                continue;
            }
            if let Some(c) = st.conns.remove(&(addr.clone(), lane)) {
                conns.push((lane, c));
            }
        }
        let share = bodies.len().div_ceil(conns.len().max(1));
        let chunks: Vec<&[Vec<u8>]> = bodies.chunks(share).collect();
        let mut work = Vec::with_capacity(conns.len());
        for (i, (lane, conn)) in conns.into_iter().enumerate() {
            let Some(chunk) = chunks.get(i).copied() else {
                st.conns.insert((addr.clone(), lane), conn);
                continue;
            };
            let first = st.ids(chunk.len());
            work.push((lane, conn, chunk, first));
        }
        let client_id = self.client_id.as_str();
        let deadline = self.deadline(st);
        let done: Vec<LaneDone> = std::thread::scope(|scope| {
            let handles: Vec<_> = work
                .into_iter()
                .map(|(lane, mut conn, chunk, first)| {
                    scope.spawn(move || {
                        let r = pipeline(
                            &mut conn.stream,
                            api_key,
                            version,
                            first,
                            client_id,
                            chunk,
                            deadline,
                        );
                        (lane, conn, chunk.len(), r)
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().expect("pipeline thread panicked"))
                .collect()
        });
        let mut out = Vec::with_capacity(bodies.len());
        for (lane, conn, n, r) in done {
            match r {
                Ok(answers) => {
                    st.conns.insert((addr.clone(), lane), conn);
                    out.extend(answers.into_iter().map(Ok));
                }
                Err(e) => {
                    let e = e.context(format!("broker {addr}"));
                    out.extend((0..n).map(|_| Err(e.clone())));
                }
            }
        }
        Ok(out)
    }

    /// Opens the connection `lane` to `addr` when absent and checks it serves the version.
    fn ensure_conn(
        &self,
        st: &mut State,
        addr: &str,
        lane: usize,
        api_key: i16,
        version: i16,
    ) -> Result<(), Unavailable> {
        let key = (addr.to_string(), lane);
        if !st.conns.contains_key(&key) {
            let conn = self.connect(st, addr)?;
            st.conns.insert(key.clone(), conn);
        }
        if !p::supports(&st.conns[&key].versions, api_key, version) {
            let why = format!(
                "broker {addr} does not support API {api_key} v{version} (Kafka 3.0+); using one request per group"
            );
            st.unsupported = Some(why.clone());
            return Err(Unavailable(why));
        }
        Ok(())
    }

    /// Sends `bodies` pipelined on connection `lane` to `addr` (opened and version-checked
    /// when absent) and reads their answers in order. A failed connection is dropped.
    fn call_addr(
        &self,
        st: &mut State,
        addr: &str,
        lane: usize,
        api_key: i16,
        version: i16,
        bodies: &[Vec<u8>],
    ) -> Result<Vec<Vec<u8>>, Unavailable> {
        self.ensure_conn(st, addr, lane, api_key, version)?;
        let key = (addr.to_string(), lane);
        let first = st.ids(bodies.len());
        let deadline = self.deadline(st);
        let conn = st.conns.get_mut(&key).expect("opened above");
        let result = pipeline(
            &mut conn.stream,
            api_key,
            version,
            first,
            &self.client_id,
            bodies,
            deadline,
        );
        if result.is_err() {
            st.conns.remove(&key);
        }
        result.map_err(|e| Unavailable(format!("broker {addr}: {e}")))
    }

    /// The running call's deadline (a call outside `many` gets the client's timeout).
    fn deadline(&self, st: &State) -> Deadline {
        st.deadline.unwrap_or_else(|| Deadline::after(self.timeout))
    }

    /// One request on a connection being opened.
    fn ask(
        &self,
        st: &mut State,
        stream: &mut Stream,
        api_key: i16,
        version: i16,
        body: Vec<u8>,
    ) -> Result<Vec<u8>, Error> {
        let id = st.ids(1);
        let deadline = self.deadline(st);
        let mut answers = pipeline(
            stream,
            api_key,
            version,
            id,
            &self.client_id,
            &[body],
            deadline,
        )?;
        Ok(answers.pop().unwrap_or_default())
    }

    /// TCP, then TLS when configured, ApiVersions, and SASL when configured.
    fn connect(&self, st: &mut State, addr: &str) -> Result<Conn, Unavailable> {
        let fail = |e: String| Unavailable(format!("broker {addr}: {e}"));
        let deadline = self.deadline(st);
        let sock = addr
            .to_socket_addrs()
            .map_err(|e| fail(format!("resolve: {e}")))?
            .next()
            .ok_or_else(|| fail("resolves to no address".into()))?;
        let left = deadline.left();
        if left.is_zero() {
            return Err(fail(deadline.timeout().to_string()));
        }
        let tcp =
            TcpStream::connect_timeout(&sock, left).map_err(|e| fail(format!("connect: {e}")))?;
        tcp.set_nodelay(true).map_err(|e| fail(e.to_string()))?;
        let host = addr.rsplit_once(':').map_or(addr, |(h, _)| h);
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let mut stream = Stream::open(tcp, host, self.security.tls.as_ref(), deadline)
            .map_err(|e| fail(e.to_string()))?;
        let body = self
            .ask(st, &mut stream, API_VERSIONS, 0, Vec::new())
            .map_err(|e| fail(e.to_string()))?;
        let versions = p::decode_api_versions(&body)
            .map_err(|e| fail(e.to_string()))?
            .map_err(|c| fail(format!("ApiVersions: {}", code_text(c))))?;
        if let Some(sasl) = &self.security.sasl {
            self.authenticate(st, &mut stream, sasl)
                .map_err(|e| fail(format!("SASL {}: {e}", sasl.mechanism())))?;
        }
        Ok(Conn { stream, versions })
    }

    /// SaslHandshake v1, then the mechanism's exchange in SaslAuthenticate v2 frames.
    fn authenticate(&self, st: &mut State, stream: &mut Stream, sasl: &Sasl) -> Result<(), Error> {
        let answer = self.ask(
            st,
            stream,
            SASL_HANDSHAKE,
            SASL_HANDSHAKE_VERSION,
            p::sasl_handshake_body(sasl.mechanism()),
        )?;
        if let Err((code, offered)) = p::decode_sasl_handshake(&answer)? {
            return Err(Error::code(
                Code(i32::from(code)),
                format!(
                    "{}; the broker offers {}",
                    code_text(code),
                    offered.join(", ")
                ),
            ));
        }
        let exchange =
            |st: &mut State, stream: &mut Stream, bytes: Vec<u8>| -> Result<Vec<u8>, Error> {
                let body = p::sasl_authenticate_body(&bytes);
                let answer = self.ask(
                    st,
                    stream,
                    SASL_AUTHENTICATE,
                    SASL_AUTHENTICATE_VERSION,
                    body,
                )?;
                p::decode_sasl_authenticate(&answer)?
                    .map_err(|(code, message)| Error::code(Code(i32::from(code)), message))
            };
        match sasl {
            Sasl::Plain { user, password } => {
                exchange(st, stream, format!("\0{user}\0{password}").into_bytes())?;
            }
            Sasl::Scram {
                mechanism,
                user,
                password,
            } => {
                let mut nonce = [0u8; 24];
                ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut nonce)
                    .map_err(|_| Error::Client("no random bytes for the SCRAM nonce".into()))?;
                let nonce =
                    base64::Engine::encode(&base64::engine::general_purpose::STANDARD, nonce);
                let mut client = scram::Client::new(*mechanism, user, password, &nonce);
                let server_first = exchange(st, stream, client.first())?;
                let fin = client
                    .fin(&server_first)
                    .map_err(|e| Error::Client(e.to_string()))?;
                let server_final = exchange(st, stream, fin)?;
                client
                    .verify(&server_final)
                    .map_err(|e| Error::Client(e.to_string()))?;
            }
        }
        Ok(())
    }
}

/// A group no answer spoke of.
fn no_answer() -> Error {
    Error::Protocol("no answer".into())
}

/// Requests written before their answers are read: bounds what both sides buffer, so a
/// long pipeline never stalls with both send buffers full.
const WINDOW: usize = 64;

/// Writes the frames, a window at a time, reading that window's answers (in order) before
/// the next.
fn pipeline(
    stream: &mut Stream,
    api_key: i16,
    version: i16,
    first_id: i32,
    client_id: &str,
    bodies: &[Vec<u8>],
    deadline: Deadline,
) -> Result<Vec<Vec<u8>>, Error> {
    let flexible = p::is_flexible(api_key, version);
    let mut out = Vec::with_capacity(bodies.len());
    for (w, window) in bodies.chunks(WINDOW).enumerate() {
        let base = first_id.wrapping_add((w * WINDOW) as i32);
        let mut buf = Vec::new();
        for (i, body) in window.iter().enumerate() {
            buf.extend(p::frame(
                api_key,
                version,
                base.wrapping_add(i as i32),
                client_id,
                body,
            ));
        }
        stream.send(&buf, deadline)?;
        for i in 0..window.len() {
            let frame = stream.receive(MAX_RESPONSE_BYTES, deadline)?;
            let (id, body) = p::response_header(&frame, flexible)?;
            let expected = base.wrapping_add(i as i32);
            if id != expected {
                return Err(Error::Protocol(format!(
                    "answer for request {id}, expected {expected}"
                )));
            }
            out.push(body.to_vec());
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    #[test]
    fn lanes_table() {
        // (requests, per lane, lanes)
        let cases = [
            (0, 256, 1),
            (1, 256, 1),
            (511, 256, 1),
            (512, 256, 2),
            (10_000, 256, MAX_LANES),
            (3, 1, 3),
            (10, 1, MAX_LANES),
            (5, 0, MAX_LANES),
        ];
        for (requests, per_lane, want) in cases {
            assert_eq!(
                Lanes::default().lanes_for(requests, per_lane),
                want,
                "{requests} requests, {per_lane} per lane"
            );
        }
    }

    /// Against Apache Kafka (testkit feature; a node the lib tests share, names of each
    /// test's own): lanes lowered so that few groups take the several-connection path of
    /// commits and fetches.
    #[cfg(feature = "testkit")]
    mod on_broker {
        use super::*;
        use crate::testkit::brokers::{create_topic, shared_kafka_or_skip, LocalBroker};

        /// 40 commits at 8 per lane: 4 connections; 40 groups at 5 per fetch: 8 fetches on
        /// 4 connections.
        const LOW: Lanes = Lanes {
            max: 4,
            commits_per_lane: 8,
            groups_per_fetch: 5,
        };
        const GROUPS: usize = 40;

        /// A test's topic and groups on the shared node: its name and the process id
        /// (nextest runs each test, and each retry, in a process of its own).
        struct Names(String);

        impl Names {
            fn new(test: &str) -> Self {
                Self(format!("{test}-{}", std::process::id()))
            }

            fn topic(&self) -> String {
                format!("{}-t", self.0)
            }

            fn group(&self, g: usize) -> String {
                format!("{}-g{g:02}", self.0)
            }
        }

        /// Every group its own offsets, so that an answer given to the wrong group shows.
        fn offsets(n: &Names, g: usize, bump: i64) -> Vec<GroupOffset> {
            (0..2)
                .map(|p| GroupOffset {
                    topic: n.topic(),
                    partition: p,
                    offset: (g * 100) as i64 + i64::from(p) + bump,
                    metadata: String::new(),
                })
                .collect()
        }

        fn commits(n: &Names, bump: i64) -> Vec<(String, Vec<GroupOffset>)> {
            (0..GROUPS)
                .map(|g| (n.group(g), offsets(n, g, bump)))
                .collect()
        }

        async fn broker(n: &Names) -> Option<LocalBroker> {
            let broker = shared_kafka_or_skip("group-client").await?;
            create_topic(&broker.bootstrap_servers(), &n.topic(), 2, &[])
                .await
                .unwrap();
            Some(broker)
        }

        fn client_of(broker: &LocalBroker) -> GroupClient {
            let mut c = ClientConfig::new();
            c.set("bootstrap.servers", broker.bootstrap_servers());
            GroupClient::for_config(&c, Duration::from_secs(30), LOW).unwrap()
        }

        /// Each group's committed offsets by partition.
        fn read(client: &GroupClient, groups: &[String]) -> Vec<Vec<(i32, i64)>> {
            client
                .list_offsets(groups)
                .unwrap()
                .into_iter()
                .zip(groups)
                .map(|(r, g)| {
                    let mut v: Vec<(i32, i64)> = r
                        .unwrap_or_else(|e| panic!("read {g}: {e}"))
                        .into_iter()
                        .map(|o| (o.partition, o.offset))
                        .collect();
                    v.sort();
                    v
                })
                .collect()
        }

        fn want(n: &Names, g: usize, bump: i64) -> Vec<(i32, i64)> {
            offsets(n, g, bump)
                .into_iter()
                .map(|o| (o.partition, o.offset))
                .collect()
        }

        /// The connections open to the coordinator of `group`, by lane.
        fn lanes_open(client: &GroupClient, group: &str) -> BTreeSet<usize> {
            let st = client.lock();
            let c = &st.coordinators[group];
            let addr = format!("{}:{}", c.host, c.port);
            st.conns
                .keys()
                .filter(|(a, _)| *a == addr)
                .map(|(_, lane)| *lane)
                .collect()
        }

        /// Shuts down connection `lane` to the coordinator of the groups (all on one broker),
        /// known as `group`'s.
        fn break_lane(st: &State, group: &str, lane: usize) {
            let c = &st.coordinators[group];
            let addr = format!("{}:{}", c.host, c.port);
            st.conns[&(addr, lane)]
                .stream
                .tcp()
                .shutdown(std::net::Shutdown::Both)
                .unwrap();
        }

        #[tokio::test(flavor = "multi_thread")]
        async fn many_groups_over_several_connections_keep_their_own_answers() {
            let n = Names::new("answers");
            let Some(broker) = broker(&n).await else {
                return;
            };
            let client = client_of(&broker);
            // One group's commit is refused (a topic the broker does not know); it sits in
            // the third lane's share, so its answer must come back to it and only to it.
            let refused = 25;
            let mut commits = commits(&n, 0);
            commits[refused].1[0].topic = "missing".into();
            let mut names: Vec<String> = commits.iter().map(|(g, _)| g.clone()).collect();
            tokio::task::block_in_place(|| {
                let results = client.commit_offsets(&commits).unwrap();
                assert_eq!(
                    lanes_open(&client, &n.group(0)),
                    BTreeSet::from([0, 1, 2, 3])
                );
                for (g, r) in results.iter().enumerate() {
                    if g == refused {
                        let e = r.as_ref().expect_err("commit to an unknown topic");
                        assert_eq!(
                            e.error_code(),
                            Some(crate::kafka::Code::UNKNOWN_TOPIC_OR_PARTITION)
                        );
                        let e = e.to_string();
                        assert!(
                            e.contains(&format!("\"{}\"", n.group(refused)))
                                && e.contains("missing/0"),
                            "{e}"
                        );
                    } else {
                        assert!(r.is_ok(), "group {g}: {r:?}");
                    }
                }
                names.push("never".into());
                // A client of its own, so that the connections it opens are the fetches'.
                let reader = client_of(&broker);
                let got = read(&reader, &names);
                assert_eq!(
                    lanes_open(&reader, &n.group(0)),
                    BTreeSet::from([0, 1, 2, 3])
                );
                for (g, got) in got.iter().enumerate() {
                    let want = match g {
                        // Partitions are committed one by one: its other one stands.
                        _ if g == refused => vec![want(&n, g, 0)[1]],
                        GROUPS => vec![],
                        _ => want(&n, g, 0),
                    };
                    assert_eq!(got, &want, "group {}", names[g]);
                }
            });
        }

        #[tokio::test(flavor = "multi_thread")]
        async fn a_failed_connection_fails_only_its_own_groups() {
            let n = Names::new("lanes");
            let Some(broker) = broker(&n).await else {
                return;
            };
            let client = client_of(&broker);
            let names: Vec<String> = commits(&n, 0).into_iter().map(|(g, _)| g).collect();
            tokio::task::block_in_place(|| {
                assert!(client
                    .commit_offsets(&commits(&n, 0))
                    .unwrap()
                    .iter()
                    .all(Result::is_ok));
                assert_eq!(
                    lanes_open(&client, &n.group(0)),
                    BTreeSet::from([0, 1, 2, 3])
                );
                // Lane 2 (groups 20-29, a contiguous quarter) loses its connection.
                let mut st = client.lock();
                break_lane(&st, &n.group(0), 2);
                let coord = st.coordinators[&n.group(0)].clone();
                let bodies: Vec<Vec<u8>> = commits(&n, 1)
                    .iter()
                    .map(|(g, o)| p::offset_commit_body(g, o))
                    .collect();
                let answers = client
                    .call(
                        &mut st,
                        &coord,
                        OFFSET_COMMIT,
                        OFFSET_COMMIT_VERSION,
                        &bodies,
                        LOW.max,
                    )
                    .unwrap();
                drop(st);
                assert_eq!(answers.len(), GROUPS);
                for (g, a) in answers.iter().enumerate() {
                    match a {
                        Err(e) => assert!((20..30).contains(&g), "group {g}: {e}"),
                        Ok(body) => {
                            assert!(!(20..30).contains(&g), "group {g} answered");
                            let parts = p::decode_offset_commit(body).unwrap();
                            assert!(parts.iter().all(|(_, _, e)| *e == p::code::NONE));
                        }
                    }
                }
                let bumped = |g: usize| if (20..30).contains(&g) { 0 } else { 1 };
                for (g, got) in read(&client, &names).iter().enumerate() {
                    assert_eq!(got, &want(&n, g, bumped(g)), "group {g}");
                }
                // Through `commit_offsets`, the groups of a failed connection are looked up
                // again and retried: nothing is lost. (The read above reopened lane 2.)
                break_lane(&client.lock(), &n.group(0), 2);
                assert!(client
                    .commit_offsets(&commits(&n, 2))
                    .unwrap()
                    .iter()
                    .all(Result::is_ok));
                for (g, got) in read(&client, &names).iter().enumerate() {
                    assert_eq!(got, &want(&n, g, 2), "group {g}");
                }
            });
        }
    }
}

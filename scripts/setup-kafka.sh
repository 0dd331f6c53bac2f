#!/usr/bin/env bash
# Fetches the Apache Kafka broker and MirrorMaker 2 that the tests and benches run, with Maven
# from Maven Central (versions in scripts/kafka/pom.xml), into a cache outside the checkout:
#
#   $MIRRORFLOW_KAFKA_HOME (default ~/.cache/mirrorflow/kafka)
#     broker/libs/*.jar        kafka_2.13 + kafka-tools, started with `java -cp` (KRaft)
#     broker/kafka.jsa         a class-data-sharing archive of a broker's start (about 40 %
#                              off each broker's start-up; rebuilt when the jars change)
#     mirror-maker/libs/*.jar  connect-mirror + connect-mirror-client, on their own classpath
#
# Idempotent: a profile whose jars match the pom is kept. Called by scripts/setup.sh.
set -euo pipefail
cd "$(dirname "$0")/kafka"

HOME_DIR="${MIRRORFLOW_KAFKA_HOME:-$HOME/.cache/mirrorflow/kafka}"
JAVA="${MIRRORFLOW_JAVA:-java}"
log() { printf '[setup-kafka] %s\n' "$*" >&2; }

command -v mvn >/dev/null || { log "mvn not found: install Maven 3.8+ (apt-get install maven)"; exit 1; }
command -v "$JAVA" >/dev/null || { log "$JAVA not found: install a JDK 17+ (apt-get install openjdk-17-jdk-headless)"; exit 1; }
# The MirrorMaker 2 compatibility tests compile a small Java program against MM2's jars.
command -v javac >/dev/null || [ -x "$(dirname "$(command -v "$JAVA")")/javac" ] ||
  { log "javac not found: install a JDK 17+, not only a JRE (apt-get install openjdk-17-jdk-headless)"; exit 1; }

stamp="$(sha256sum pom.xml | cut -d' ' -f1)"

# fetch PROFILE DIR VERSION_PROPERTY
fetch() {
  local profile=$1 dir=$HOME_DIR/$2 property=$3 version tmp
  if [ -f "$dir/.stamp" ] && [ "$(cat "$dir/.stamp")" = "$stamp" ]; then
    return 0
  fi
  version="$(sed -n "s:.*<$property>\(.*\)</$property>.*:\1:p" pom.xml)"
  log "fetching $profile $version with Maven"
  tmp="$(mktemp -d "$HOME_DIR/.fetch-XXXXXX")"
  if ! mvn -B -P "$profile" dependency:copy-dependencies -Dstyle.color=never \
    -DincludeScope=runtime -DoutputDirectory="$tmp/libs" >"$tmp/maven.log" 2>&1; then
    tail -n 40 "$tmp/maven.log" >&2
    log "Maven could not fetch $profile $version (its log above)"
    exit 1
  fi
  rm -f "$tmp/maven.log"
  printf '%s\n' "$version" >"$tmp/VERSION"
  printf '%s\n' "$stamp" >"$tmp/.stamp"
  rm -rf "$dir"
  mv "$tmp" "$dir"
}

# A class-data-sharing archive of one broker start: the JVM loads about 9,000 classes at
# start, and mapping them from the archive takes a broker from about 2.3 s to 1.3 s (measured on
# this project's 2-core machines). Made from a throwaway broker; the testkit uses it when present.
archive() {
  local dir=$HOME_DIR/broker work port cport
  [ -f "$dir/kafka.jsa" ] && return 0
  log "recording the broker's class-data-sharing archive (a few seconds)"
  work="$(mktemp -d)"
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  cport=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  cat >"$work/server.properties" <<PROPS
process.roles=broker,controller
node.id=1
listeners=PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$cport
advertised.listeners=PLAINTEXT://127.0.0.1:$port
controller.listener.names=CONTROLLER
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
controller.quorum.voters=1@127.0.0.1:$cport
log.dirs=$work/data
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
super.users=User:ANONYMOUS
PROPS
  "$JAVA" -cp "$dir/libs/*" kafka.tools.StorageTool format -t MkU3OEVBNTcwNTJENDM2Qg \
    -c "$work/server.properties" >"$work/format.log" 2>&1
  printf '%s\n' 'rootLogger.level = INFO' 'rootLogger.appenderRef.out.ref = OUT' \
    'appender.out.type = Console' 'appender.out.name = OUT' \
    'appender.out.layout.type = PatternLayout' 'appender.out.layout.pattern = %m%n' >"$work/log4j2.properties"
  "$JAVA" -XX:ArchiveClassesAtExit="$work/kafka.jsa" -Xlog:cds=error -Xmx256m \
    -Dlog4j2.configurationFile="$work/log4j2.properties" -cp "$dir/libs/*" \
    kafka.Kafka "$work/server.properties" >"$work/broker.log" 2>&1 &
  local pid=$! started=""
  for _ in $(seq 1 1800); do
    if grep -q 'Kafka Server started' "$work/broker.log"; then started=1; break; fi
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  kill -TERM "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  if [ -n "$started" ] && [ -s "$work/kafka.jsa" ]; then
    mv "$work/kafka.jsa" "$dir/kafka.jsa"
  else
    log "no archive recorded (brokers start without it); the broker said:"
    tail -n 20 "$work/broker.log" >&2
  fi
  rm -rf "$work"
}

mkdir -p "$HOME_DIR"
fetch broker broker kafka.version
fetch mirror-maker mirror-maker mirror-maker.version
archive
log "Apache Kafka $(cat "$HOME_DIR/broker/VERSION") and MirrorMaker 2 $(cat "$HOME_DIR/mirror-maker/VERSION") in $HOME_DIR"

// "Broker as oracle": load partition directories offline with Kafka's own log-loading code
// (UnifiedLog.create -> LogLoader -> ProducerStateManager, from the broker's jars; no broker process,
// no KRaft quorum) and print the state a broker would hold for each partition right after loading it.
// Driven from Python by tests/kafka_oracle.py.
//
// Run with the JDK's source launcher (no build step), like ProducerBridge.java:
//   java -cp 'build/kafka/4.3.1/libs/*' scripts/kafka/java/LogStateOracle.java [REQUEST_JSON...]
// The same source compiles and runs against Kafka 4.3.1 and 4.4.0 (tests/test_kafka_oracle.py,
// tests/test_broker_oracle.py run both).
// With arguments, each argument is one request (a JSON object); without, requests are read from stdin,
// one JSON object per line (blank lines ignored). One JSON object per request on stdout, in order,
// flushed after each one. stdout carries nothing else: System.out is redirected to stderr for the
// duration of the run, so any library chatter goes to stderr.
//
// Request: {"dir": partition dir, "topic": T, "partition": N, "clean_shutdown": bool,
//           "recovery_point": long|null, "log_start_offset": long|null, "high_watermark": long|null,
//           "now_ms": long, "producer_id_expiration_ms": int (86400000), "max_transaction_timeout_ms": int (900000),
//           "log_config": {name: value} (optional topic-config overrides of the default LogConfig),
//           "keep_copy": bool (optional, debugging: keep the loaded copy, closed, and report it as "kept_copy"),
//           "id": any (optional, echoed back)}
// topic/partition default to the dir's "<topic>-<partition>" name.
// Response fields (log_start_offset, log_end_offset, high_watermark, first_unstable_offset, last_stable_offset,
// segments, producers, ongoing_transactions, files_changed_by_load, error, ...): see tests/kafka_oracle.py.
//
// Per request: the regular files of "dir" (no sub-directories, no symlinks) are copied, with their mtimes,
// into a fresh "<tmp>/<topic>-<partition>/" (the loader renames, deletes, truncates and rewrites files;
// the input is only ever read), loaded with UnifiedLog.create (fixed clock at now_ms, lastShutdownClean,
// logStartOffset/recoveryPoint or 0, default LogConfig), then log.updateHighWatermark(hw) when a high
// watermark is given (what a broker does at startup from replication-offset-checkpoint). The copy is
// deleted afterwards. Errors are per request ("error"); the run never stops on one.
import java.io.BufferedReader;
import java.io.File;
import java.io.FileOutputStream;
import java.io.FileDescriptor;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.lang.reflect.Field;
import java.nio.charset.StandardCharsets;
import java.nio.file.DirectoryStream;
import java.nio.file.FileVisitResult;
import java.nio.file.Files;
import java.nio.file.LinkOption;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.file.SimpleFileVisitor;
import java.nio.file.StandardCopyOption;
import java.nio.file.attribute.BasicFileAttributes;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.OptionalLong;
import java.util.TreeMap;
import java.util.concurrent.Delayed;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.TimeUnit;
import java.util.function.Supplier;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;

import org.apache.kafka.common.utils.Time;
import org.apache.kafka.server.util.Scheduler;
import org.apache.kafka.storage.internals.log.BatchMetadata;
import org.apache.kafka.storage.internals.log.LogConfig;
import org.apache.kafka.storage.internals.log.LogDirFailureChannel;
import org.apache.kafka.storage.internals.log.LogOffsetMetadata;
import org.apache.kafka.storage.internals.log.LogSegment;
import org.apache.kafka.storage.internals.log.ProducerStateEntry;
import org.apache.kafka.storage.internals.log.ProducerStateManager;
import org.apache.kafka.storage.internals.log.ProducerStateManagerConfig;
import org.apache.kafka.storage.internals.log.TxnMetadata;
import org.apache.kafka.storage.internals.log.UnifiedLog;
import org.apache.kafka.storage.log.metrics.BrokerTopicStats;

public class LogStateOracle {
    static final ObjectMapper JSON = new ObjectMapper();
    static final int PRODUCER_ID_EXPIRATION_CHECK_INTERVAL_MS = 600_000;  // broker default; never fires here
    static PrintStream out;

    /** A clock stopped at the request's now_ms (sleeping advances it, like Kafka's MockTime). */
    static final class FixedTime implements Time {
        long ms;
        FixedTime(long ms) { this.ms = ms; }
        public long milliseconds() { return ms; }
        public long nanoseconds() { return ms * 1_000_000L; }
        public void sleep(long d) { ms += d; }
        public void waitObject(Object o, Supplier<Boolean> cond, long deadlineMs) throws InterruptedException {
            if (!cond.get()) throw new InterruptedException("FixedTime.waitObject: condition not met (offline load)");
        }
    }

    /** Records what the log asks to schedule. Only one-shot tasks without delay (the leader-epoch
     *  checkpoint flush) are run, synchronously, by runImmediate() after loading: a broker runs them at
     *  once. Delayed ones (async deletion of ".deleted" files after file.delete.delay.ms) and periodic
     *  ones (the producer-expiration check) are never run: the state reported is the one right after
     *  loading. */
    static final class RecordingScheduler implements Scheduler {
        final List<String> names = new ArrayList<>();
        final List<Runnable> immediate = new ArrayList<>();
        final List<Integer> immediateIndex = new ArrayList<>();
        public void startup() {}
        public void shutdown() {}
        public void resizeThreadPool(int n) {}
        public ScheduledFuture<?> schedule(String name, Runnable fun, long delayMs, long periodMs) {
            if (periodMs <= 0 && delayMs <= 0) {
                immediate.add(fun);
                immediateIndex.add(names.size());
                names.add(name + " (once, now)");
            } else {
                names.add(name + (periodMs > 0 ? " (every " + periodMs + " ms, not run)" : " (once, after " + delayMs + " ms, not run)"));
            }
            return new NotRun();
        }
        void runImmediate() {
            for (int i = 0; i < immediate.size(); i++) {  // a task may schedule more
                int at = immediateIndex.get(i);
                try {
                    immediate.get(i).run();
                    names.set(at, names.get(at).replace("(once, now)", "(once, now: ran)"));
                } catch (Throwable t) {
                    names.set(at, names.get(at).replace("(once, now)", "(once, now: failed: " + describe(t) + ")"));
                }
            }
            immediate.clear();
            immediateIndex.clear();
        }
    }

    static final class NotRun implements ScheduledFuture<Object> {
        boolean cancelled;
        public long getDelay(TimeUnit unit) { return Long.MAX_VALUE; }
        public int compareTo(Delayed o) { return 0; }
        public boolean cancel(boolean mayInterrupt) { cancelled = true; return true; }
        public boolean isCancelled() { return cancelled; }
        public boolean isDone() { return cancelled; }
        public Object get() { return null; }
        public Object get(long t, TimeUnit u) { return null; }
    }

    public static void main(String[] args) throws Exception {
        out = new PrintStream(new FileOutputStream(FileDescriptor.out), true, StandardCharsets.UTF_8);
        System.setOut(System.err);  // nothing but our JSON lines on the real stdout
        BrokerTopicStats stats = new BrokerTopicStats();
        if (args.length > 0) {
            for (String a : args) handleLine(a, stats);
        } else {
            BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
            String line;
            while ((line = in.readLine()) != null) {
                if (!line.isBlank()) handleLine(line, stats);
            }
        }
        out.flush();
        System.exit(0);  // no lingering non-daemon threads (metrics reporters etc.)
    }

    static void handleLine(String line, BrokerTopicStats stats) {
        ObjectNode res = JSON.createObjectNode();
        JsonNode req = null;
        try {
            req = JSON.readTree(line);
            if (req == null || !req.isObject()) throw new IllegalArgumentException("request is not a JSON object");
            res = handle((ObjectNode) req, stats);
        } catch (Throwable t) {
            if (req != null && req.isObject()) {
                res.set("id", req.get("id"));
                res.set("dir", req.get("dir"));
                res.set("topic", req.get("topic"));
                res.set("partition", req.get("partition"));
            }
            for (String k : new String[] {"log_start_offset", "log_end_offset", "high_watermark", "first_unstable_offset",
                    "last_stable_offset", "recovery_point", "segments", "producers", "ongoing_transactions",
                    "unreplicated_transactions", "latest_snapshot_offset", "files_changed_by_load", "scheduled_tasks",
                    "skipped_entries"}) {
                res.putNull(k);
            }
            res.put("error", describe(t));
        }
        out.println(res.toString());
        out.flush();
    }

    static String describe(Throwable t) {
        StringBuilder sb = new StringBuilder(t.getClass().getName() + ": " + t.getMessage());
        Throwable c = t.getCause();
        for (int i = 0; c != null && c != t && i < 3; i++, c = c.getCause()) {
            sb.append(" (caused by ").append(c.getClass().getName()).append(": ").append(c.getMessage()).append(')');
        }
        return sb.toString();
    }

    static Long optLong(JsonNode req, String key) {
        JsonNode n = req.get(key);
        return n == null || n.isNull() ? null : n.asLong();
    }

    static ObjectNode handle(ObjectNode req, BrokerTopicStats stats) throws Exception {
        if (!req.hasNonNull("dir")) throw new IllegalArgumentException("request without \"dir\"");
        Path src = Paths.get(req.get("dir").asText());
        String topic;
        int partition;
        if (req.hasNonNull("topic") && req.hasNonNull("partition")) {
            topic = req.get("topic").asText();
            partition = req.get("partition").asInt();
        } else {
            String name = src.getFileName().toString();
            int dash = name.lastIndexOf('-');
            if (dash <= 0) throw new IllegalArgumentException("cannot tell topic/partition from " + name);
            topic = req.hasNonNull("topic") ? req.get("topic").asText() : name.substring(0, dash);
            partition = req.hasNonNull("partition") ? req.get("partition").asInt() : Integer.parseInt(name.substring(dash + 1));
        }
        boolean clean = req.path("clean_shutdown").asBoolean(false);
        Long recoveryPoint = optLong(req, "recovery_point");
        Long logStartOffset = optLong(req, "log_start_offset");
        Long hw = optLong(req, "high_watermark");
        if (!req.hasNonNull("now_ms")) throw new IllegalArgumentException("request without \"now_ms\"");
        long nowMs = req.get("now_ms").asLong();
        int expirationMs = req.path("producer_id_expiration_ms").asInt(86_400_000);
        int maxTxnTimeoutMs = req.path("max_transaction_timeout_ms").asInt(900_000);
        boolean keep = req.path("keep_copy").asBoolean(false);  // debugging: leave the loaded copy (closed) behind

        ObjectNode res = JSON.createObjectNode();
        res.set("id", req.get("id"));
        res.put("dir", req.get("dir").asText());
        res.put("topic", topic);
        res.put("partition", partition);
        if (!Files.isDirectory(src)) {  // a symlinked partition dir is followed; entries inside it are not
            throw new java.nio.file.NoSuchFileException(src + " (not a directory)");
        }

        Path tmpRoot = Files.createTempDirectory("log-state-oracle-");
        UnifiedLog log = null;
        try {
            Path copy = tmpRoot.resolve(topic + "-" + partition);
            Files.createDirectory(copy);
            ArrayNode skipped = JSON.createArrayNode();
            Map<String, Long> copied = new TreeMap<>();
            try (DirectoryStream<Path> ds = Files.newDirectoryStream(src)) {
                for (Path p : ds) {
                    String name = p.getFileName().toString();
                    if (!Files.isRegularFile(p, LinkOption.NOFOLLOW_LINKS)) {
                        skipped.add(name);
                        continue;
                    }
                    Path dst = copy.resolve(name);
                    Files.copy(p, dst);  // no COPY_ATTRIBUTES: a read-only input must give a writable copy
                    Files.setLastModifiedTime(dst, Files.getLastModifiedTime(p, LinkOption.NOFOLLOW_LINKS));
                    copied.put(name, Files.size(dst));
                }
            }

            RecordingScheduler scheduler = new RecordingScheduler();
            ProducerStateManagerConfig psmConfig = new ProducerStateManagerConfig(expirationMs, false);
            Map<String, Object> overrides = new HashMap<>();
            req.path("log_config").properties().forEach(e -> overrides.put(e.getKey(), e.getValue().asText()));
            log = UnifiedLog.create(copy.toFile(), new LogConfig(overrides),
                    logStartOffset == null ? 0L : logStartOffset,
                    recoveryPoint == null ? 0L : recoveryPoint,
                    scheduler, stats, new FixedTime(nowMs), maxTxnTimeoutMs, psmConfig,
                    PRODUCER_ID_EXPIRATION_CHECK_INTERVAL_MS, new LogDirFailureChannel(1), clean, Optional.empty());
            if (hw != null) log.updateHighWatermark(hw);
            scheduler.runImmediate();

            ProducerStateManager psm = log.producerStateManager();
            res.put("log_start_offset", log.logStartOffset());
            res.put("log_end_offset", log.logEndOffset());
            res.put("high_watermark", log.highWatermark());
            Optional<Long> fuo = log.firstUnstableOffset();
            if (fuo.isPresent()) res.put("first_unstable_offset", fuo.get()); else res.putNull("first_unstable_offset");
            res.put("last_stable_offset", log.lastStableOffset());
            res.put("recovery_point", log.recoveryPoint());
            ArrayNode segs = res.putArray("segments");
            for (LogSegment s : log.logSegments()) segs.add(s.baseOffset());

            ArrayNode producers = res.putArray("producers");
            for (ProducerStateEntry e : new TreeMap<>(psm.activeProducers()).values()) {
                ObjectNode p = producers.addObject();
                List<BatchMetadata> batches = new ArrayList<>(e.batchMetadata());
                p.put("producer_id", e.producerId());
                p.put("producer_epoch", e.producerEpoch());
                p.put("coordinator_epoch", e.coordinatorEpoch());
                p.put("first_sequence", batches.isEmpty() ? -1 : batches.get(0).firstSeq());
                p.put("last_sequence", batches.isEmpty() ? -1 : batches.get(batches.size() - 1).lastSeq());
                p.put("last_data_offset", e.lastDataOffset());
                OptionalLong cur = e.currentTxnFirstOffset();
                if (cur.isPresent()) p.put("current_txn_first_offset", cur.getAsLong()); else p.putNull("current_txn_first_offset");
                p.put("last_timestamp", e.lastTimestamp());
                ArrayNode bm = p.putArray("batches");
                for (BatchMetadata b : batches) {
                    bm.addObject().put("first_sequence", b.firstSeq()).put("last_sequence", b.lastSeq())
                      .put("first_offset", b.firstOffset()).put("last_offset", b.lastOffset()).put("timestamp", b.timestamp());
                }
            }
            res.set("ongoing_transactions", txns(psm, "ongoingTxns"));
            res.set("unreplicated_transactions", txns(psm, "unreplicatedTxns"));
            OptionalLong snap = psm.latestSnapshotOffset();
            if (snap.isPresent()) res.put("latest_snapshot_offset", snap.getAsLong()); else res.putNull("latest_snapshot_offset");

            // what loading did to the (copied) files, before any scheduled task or close() runs
            ObjectNode changes = res.putObject("files_changed_by_load");
            ArrayNode deleted = changes.putArray("deleted");
            ArrayNode created = changes.putArray("created");
            ArrayNode modified = changes.putArray("modified");
            Map<String, Path> after = new TreeMap<>();
            try (DirectoryStream<Path> ds = Files.newDirectoryStream(copy)) {
                for (Path p : ds) after.put(p.getFileName().toString(), p);
            }
            for (String name : copied.keySet()) {
                if (!after.containsKey(name)) deleted.add(name);
                else if (Files.isRegularFile(after.get(name)) && Files.mismatch(src.resolve(name), after.get(name)) != -1L) {
                    modified.add(name + describeChange(src.resolve(name), after.get(name)));
                }
            }
            for (String name : after.keySet()) if (!copied.containsKey(name)) created.add(name);
            ArrayNode sched = res.putArray("scheduled_tasks");
            for (String t : scheduler.names) sched.add(t);
            res.set("skipped_entries", skipped);
            res.putNull("error");
            return res;
        } finally {
            if (log != null) {
                try {
                    log.removeLogMetrics();
                    log.close();
                } catch (Throwable t) {
                    closeFilesOnly(log);
                }
            }
            if (keep) res.put("kept_copy", tmpRoot.resolve(topic + "-" + partition).toString());
            else deleteTree(tmpRoot);
        }
    }

    /** Release the file handles of a log whose close() failed, without flushing or snapshotting:
     *  UnifiedLog.closeHandlers() up to Kafka 4.3, renamed UnifiedLog.closeQuietly() in 4.4.0 (it
     *  calls LocalLog.closeQuietly()). Looked up by name so one source runs on both. */
    static void closeFilesOnly(UnifiedLog log) {
        for (String name : new String[] {"closeQuietly", "closeHandlers"}) {
            try {
                UnifiedLog.class.getMethod(name).invoke(log);
                return;
            } catch (NoSuchMethodException e) {
                // the other name
            } catch (Throwable ignored) {
                return;
            }
        }
    }

    /** " (size A -> B[, first A bytes unchanged])" when the size changed, "" when only content did. */
    static String describeChange(Path before, Path after) throws IOException {
        long a = Files.size(before), b = Files.size(after);
        if (a == b) return " (content)";
        long common = Math.min(a, b);
        boolean samePrefix = true;
        try (java.io.InputStream x = Files.newInputStream(before); java.io.InputStream y = Files.newInputStream(after)) {
            byte[] bx = new byte[65536], by = new byte[65536];
            long left = common;
            while (left > 0 && samePrefix) {
                int n = (int) Math.min(bx.length, left);
                int rx = x.readNBytes(bx, 0, n), ry = y.readNBytes(by, 0, n);
                if (rx != n || ry != n || !java.util.Arrays.equals(bx, 0, n, by, 0, n)) samePrefix = false;
                left -= n;
            }
        }
        return " (size " + a + " -> " + b + (samePrefix ? ", first " + common + " bytes unchanged" : "") + ")";
    }

    @SuppressWarnings("unchecked")
    static ArrayNode txns(ProducerStateManager psm, String field) {
        ArrayNode arr = JSON.createArrayNode();
        try {
            Field f = ProducerStateManager.class.getDeclaredField(field);
            f.setAccessible(true);
            TreeMap<Long, TxnMetadata> m = (TreeMap<Long, TxnMetadata>) f.get(psm);
            for (TxnMetadata t : m.values()) {
                ObjectNode o = arr.addObject();
                o.put("producer_id", t.producerId);
                o.put("first_offset", t.firstOffset.messageOffset);
                if (t.lastOffset.isPresent()) o.put("last_offset", t.lastOffset.getAsLong()); else o.putNull("last_offset");
            }
            return arr;
        } catch (ReflectiveOperationException | RuntimeException e) {
            return null;  // field not reachable in this Kafka version
        }
    }

    static void deleteTree(Path root) {
        try {
            Files.walkFileTree(root, new SimpleFileVisitor<Path>() {
                @Override public FileVisitResult visitFile(Path f, BasicFileAttributes a) throws IOException {
                    Files.deleteIfExists(f);
                    return FileVisitResult.CONTINUE;
                }
                @Override public FileVisitResult postVisitDirectory(Path d, IOException e) throws IOException {
                    Files.deleteIfExists(d);
                    return FileVisitResult.CONTINUE;
                }
            });
        } catch (IOException e) {
            System.err.println("LogStateOracle: could not delete " + root + ": " + e);
        }
    }
}

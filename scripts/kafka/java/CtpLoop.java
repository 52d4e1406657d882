// A consume-transform-produce (CTP) application as fast as it goes, for tests/tv1_high_rate.py (issue 55).
//
// Run with the JDK's source launcher (no build step), on the jars of the client version to test:
//   java -cp 'build/kafka/3.5.2/libs/*' scripts/kafka/java/CtpLoop.java key=value...
// Keys: bootstrap (required), input, output (topics; default ctp-in, ctp-out), group (default ctp),
// instances (CTP instances, each a thread with its own consumer and transactional producer "<txn.prefix><i>";
// default 2), seconds (how long the CTP loops run; default 60), feed.rate (records per second the feeder
// writes to the input topic, round robin over its partitions; default 500), feed.partitions (default 3),
// txn.prefix (default ctp-), max.poll.records (default 20). Other keys with a "producer." or "consumer."
// prefix go to the CTP instances' producers or consumers.
//
// Each instance: a consumer of `input` in `group` (subscribe, isolation.level=read_committed, no auto commit)
// and a transactional producer; for every non-empty poll: beginTransaction, one output record per input
// record to the output partition of the same number, sendOffsetsToTransaction(next offsets,
// consumer.groupMetadata()), commitTransaction. What a Kafka Streams or hand-written EOS app does with
// a client of transaction version 0/1 (every client before 4.0): one producer epoch for all transactions.
// A transaction that fails is aborted and the consumer rewound to the group's committed offsets.
//
// Output, one JSON object per line on stdout: {"event":"init",...} per instance once initTransactions
// returned (producer id and epoch, "tv2" as the client has it: clients before 4.0 have no transaction
// version 2), {"event":"feeder",...} and {"event":"done",...} per instance at the end (committed and
// aborted transactions, records committed per output partition, the errors seen).
import java.lang.reflect.Field;
import java.lang.reflect.Method;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public class CtpLoop {
    static final Map<String, String> conf = new HashMap<>();

    static String get(String k, String dflt) {
        return conf.getOrDefault(k, dflt);
    }

    static synchronized void emit(String json) {
        System.out.println(json);
        System.out.flush();
    }

    static String quote(String s) {
        return "\"" + s.replace("\\", "/").replace("\"", "'").replace("\n", " ") + "\"";
    }

    public static void main(String[] args) throws Exception {
        for (String a : args) {
            int i = a.indexOf('=');
            conf.put(a.substring(0, i), a.substring(i + 1));
        }
        int instances = Integer.parseInt(get("instances", "2"));
        long deadline = System.currentTimeMillis() + (long) (Double.parseDouble(get("seconds", "60")) * 1000);
        Feeder feeder = new Feeder(deadline);
        feeder.start();
        List<Ctp> ctps = new ArrayList<>();
        for (int i = 0; i < instances; i++) {
            Ctp c = new Ctp(get("txn.prefix", "ctp-") + i, deadline);
            ctps.add(c);
            c.start();
        }
        feeder.join();
        emit("{\"event\":\"feeder\",\"sent\":" + feeder.sent.get() + ",\"error\":"
                + (feeder.error == null ? "null" : quote(feeder.error)) + "}");
        for (Ctp c : ctps) {
            c.join();
            emit(c.summary());
        }
    }

    /** A plain (idempotent) producer writing `feed.rate` records a second to the input topic, round robin. */
    static class Feeder extends Thread {
        final long deadline;
        final AtomicLong sent = new AtomicLong();
        volatile String error;

        Feeder(long deadline) {
            this.deadline = deadline;
            setName("feeder");
        }

        public void run() {
            Properties p = new Properties();
            p.put("bootstrap.servers", get("bootstrap", ""));
            p.put("acks", "all");
            p.put("linger.ms", "2");
            p.put("client.id", "feeder");
            String input = get("input", "ctp-in");
            int parts = Integer.parseInt(get("feed.partitions", "3"));
            double rate = Double.parseDouble(get("feed.rate", "500"));
            try (KafkaProducer<byte[], byte[]> prod = new KafkaProducer<>(p, new ByteArraySerializer(), new ByteArraySerializer())) {
                long t0 = System.nanoTime();
                long n = 0;
                while (System.currentTimeMillis() < deadline) {
                    long due = (long) ((System.nanoTime() - t0) / 1e9 * rate);
                    while (n < due) {
                        prod.send(new ProducerRecord<>(input, (int) (n % parts), null,
                                ("in-" + n).getBytes(StandardCharsets.UTF_8)));
                        n++;
                    }
                    Thread.sleep(5);
                }
                prod.flush();
                sent.set(n);
            } catch (Exception e) {
                error = e.toString();
            }
        }
    }

    /** One CTP instance: a read_committed consumer and a transactional producer in one thread. */
    static class Ctp extends Thread {
        final String txnId;
        final long deadline;
        long committed, aborted, records, polls, emptyPolls, rebalances;
        long firstCommitMs = -1, lastCommitMs = -1;
        final Map<Integer, Long> perPartition = new TreeMap<>();
        final List<String> errors = new ArrayList<>();
        long producerId = -1;
        short epoch = -1;
        boolean tv2;
        String fatal;

        Ctp(String txnId, long deadline) {
            this.txnId = txnId;
            this.deadline = deadline;
            setName(txnId);
        }

        Properties props(String prefix) {
            Properties p = new Properties();
            for (Map.Entry<String, String> e : conf.entrySet())
                if (e.getKey().startsWith(prefix)) p.put(e.getKey().substring(prefix.length()), e.getValue());
            return p;
        }

        public void run() {
            Properties pp = props("producer.");
            pp.put("bootstrap.servers", get("bootstrap", ""));
            pp.put("transactional.id", txnId);
            pp.put("client.id", txnId);
            Properties cp = props("consumer.");
            cp.put("bootstrap.servers", get("bootstrap", ""));
            cp.put("group.id", get("group", "ctp"));
            cp.put("client.id", txnId + "-consumer");
            cp.put("isolation.level", "read_committed");
            cp.put("enable.auto.commit", "false");
            cp.put("auto.offset.reset", "earliest");
            cp.put("max.poll.records", get("max.poll.records", "20"));
            String output = get("output", "ctp-out");
            try (KafkaProducer<byte[], byte[]> prod = new KafkaProducer<>(pp, new ByteArraySerializer(), new ByteArraySerializer());
                 KafkaConsumer<byte[], byte[]> cons = new KafkaConsumer<>(cp, new ByteArrayDeserializer(), new ByteArrayDeserializer())) {
                prod.initTransactions();
                identity(prod);
                emit("{\"event\":\"init\",\"transactional_id\":" + quote(txnId) + ",\"producer_id\":" + producerId
                        + ",\"producer_epoch\":" + epoch + ",\"tv2\":" + tv2 + "}");
                cons.subscribe(List.of(get("input", "ctp-in")), new ConsumerRebalanceListener() {
                    public void onPartitionsRevoked(Collection<TopicPartition> parts) { }
                    public void onPartitionsAssigned(Collection<TopicPartition> parts) { rebalances++; }
                });
                while (System.currentTimeMillis() < deadline) {
                    ConsumerRecords<byte[], byte[]> recs = cons.poll(Duration.ofMillis(50));
                    polls++;
                    if (recs.isEmpty()) {
                        emptyPolls++;
                        continue;
                    }
                    Map<TopicPartition, OffsetAndMetadata> next = new HashMap<>();
                    Map<Integer, Long> counts = new HashMap<>();
                    try {
                        prod.beginTransaction();
                        for (ConsumerRecord<byte[], byte[]> r : recs) {
                            byte[] v = ("out-" + new String(r.value(), StandardCharsets.UTF_8)).getBytes(StandardCharsets.UTF_8);
                            prod.send(new ProducerRecord<>(output, r.partition(), r.key(), v));
                            counts.merge(r.partition(), 1L, Long::sum);
                            next.put(new TopicPartition(r.topic(), r.partition()), new OffsetAndMetadata(r.offset() + 1));
                        }
                        prod.sendOffsetsToTransaction(next, cons.groupMetadata());
                        prod.commitTransaction();
                        committed++;
                        lastCommitMs = System.currentTimeMillis();
                        if (firstCommitMs < 0) firstCommitMs = lastCommitMs;
                        for (Map.Entry<Integer, Long> e : counts.entrySet()) {
                            perPartition.merge(e.getKey(), e.getValue(), Long::sum);
                            records += e.getValue();
                        }
                    } catch (KafkaException e) {
                        if (errors.size() < 20) errors.add(e.toString());
                        try {
                            prod.abortTransaction();
                            aborted++;
                        } catch (KafkaException e2) {
                            fatal = e2.toString();
                            break;  // fenced or fatal: this instance ends
                        }
                        rewind(cons);
                    }
                }
                identity(prod);
            } catch (Exception e) {
                fatal = e.toString();
            }
        }

        /** Back to the group's committed offsets (what a CTP app does after an abort). */
        void rewind(KafkaConsumer<byte[], byte[]> cons) {
            Set<TopicPartition> assigned = cons.assignment();
            Map<TopicPartition, OffsetAndMetadata> got = cons.committed(assigned);
            for (TopicPartition tp : assigned) {
                OffsetAndMetadata om = got.get(tp);
                if (om != null) cons.seek(tp, om.offset());
                else cons.seekToBeginning(List.of(tp));
            }
        }

        /** The producer id and epoch the client holds (no public accessor: reflection, as ProducerBridge). */
        void identity(KafkaProducer<byte[], byte[]> prod) {
            try {
                Field f = KafkaProducer.class.getDeclaredField("transactionManager");
                f.setAccessible(true);
                Object tm = f.get(prod);
                Method m = tm.getClass().getDeclaredMethod("producerIdAndEpoch");
                m.setAccessible(true);
                Object pe = m.invoke(tm);
                producerId = pe.getClass().getField("producerId").getLong(pe);
                epoch = pe.getClass().getField("epoch").getShort(pe);
                try {
                    tv2 = (Boolean) tm.getClass().getMethod("isTransactionV2Enabled").invoke(tm);
                } catch (NoSuchMethodException e) {
                    tv2 = false;  // clients before 4.0 know transaction versions 0/1 only
                }
            } catch (Exception e) {
                if (errors.size() < 20) errors.add("identity: " + e);
            }
        }

        String summary() {
            StringBuilder pp = new StringBuilder("{");
            for (Map.Entry<Integer, Long> e : perPartition.entrySet()) {
                if (pp.length() > 1) pp.append(',');
                pp.append('"').append(e.getKey()).append("\":").append(e.getValue());
            }
            pp.append('}');
            List<String> q = new ArrayList<>();
            for (String s : errors) q.add(quote(s));
            return "{\"event\":\"done\",\"transactional_id\":" + quote(txnId) + ",\"producer_id\":" + producerId
                    + ",\"producer_epoch\":" + epoch + ",\"tv2\":" + tv2 + ",\"committed\":" + committed
                    + ",\"aborted\":" + aborted + ",\"records\":" + records + ",\"per_partition\":" + pp
                    + ",\"polls\":" + polls + ",\"empty_polls\":" + emptyPolls + ",\"rebalances\":" + rebalances
                    + ",\"first_commit_ms\":" + firstCommitMs + ",\"last_commit_ms\":" + lastCommitMs
                    + ",\"errors\":[" + String.join(",", q) + "],\"fatal\":" + (fatal == null ? "null" : quote(fatal)) + "}";
        }
    }
}

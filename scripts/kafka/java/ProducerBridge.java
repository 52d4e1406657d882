// A line-protocol bridge to Kafka's own Java producer, driven from Python (scripts/kafka/harness.py,
// JavaProducer). Why: only the Java client of Kafka 4.x speaks transaction version 2 (KIP-890 part 2:
// no AddPartitionsToTxn, epoch bump on every EndTxn); librdkafka and kafka-python stay on TV0/TV1.
//
// Run with the JDK's source launcher (no build step):
//   java -cp 'build/kafka/4.3.1/libs/*' scripts/kafka/java/ProducerBridge.java key=value...
// (the same source runs on the 4.4.0 and 3.5.2 jars: sample_logs/kafka-4.4 was written through it)
// Arguments are producer configs. Commands on stdin, one per line; one JSON object per line on stdout:
//   init | begin | commit | abort | flush | state | close
//   send TOPIC PARTITION VALUE        (value is a token without spaces; key is null)
//   sendkv TOPIC PARTITION KEY VALUE  (key and value are tokens; VALUE ~null sends a null value: a tombstone)
//   sendoffsets GROUP TOPIC PARTITION OFFSET  (sendOffsetsToTransaction for one partition: a transactional
//                                     offset commit of GROUP inside the open transaction, KIP-98/KIP-447)
//   init2pc | prepare | complete PRODUCER_ID:EPOCH | halt   (two-phase commit, KIP-939; see below)
// Two-phase commit: an InitProducerId (v6) with Enable2Pc makes the coordinator store the transaction
// timeout as Integer.MAX_VALUE (TransactionCoordinator.handleInitProducerId), which
// TransactionMetadata.isDistributedTwoPhaseCommitTxn() reads as "never time it out". The clients
// 4.3.1/4.4.0 accept transaction.two.phase.commit.enable but their TransactionManager never sets
// Enable2Pc in the request it builds, so "init2pc" does what KafkaProducer.initTransactions() does
// (TransactionManager.initializeTransactions(false), Sender.wakeup(), await) and, holding the
// transaction manager's lock so the sender cannot take the request first, sets Enable2Pc on the
// queued InitProducerIdRequestData (Kafka's generated class) and lets the request builder use v6, which
// InitProducerIdRequest.json marks latestVersionUnstable (AbstractRequest.Builder(ApiKeys) allows
// stable versions only; the broker advertises v6 only with unstable.api.versions.enable=true): the
// request a KIP-939 client sends. KafkaProducer has no public prepareTransaction() or
// completeTransaction() either, so "prepare" flushes and calls TransactionManager.prepareTransaction() (a
// client-side state change: no request, the coordinator still has the transaction Ongoing) and
// replies the prepared producer id:epoch (PreparedTxnState's form); "complete STATE" does what
// KIP-939's completeTransaction(PreparedTxnState) does: commit when STATE is the prepared state,
// abort otherwise. "halt" ends the JVM at once (Runtime.halt): no close(), no abort, like a process
// that died holding a prepared transaction.
// Every reply carries the producer id/epoch the client holds (read by reflection: the Java producer
// has no public accessor), so the Python side can record which identity wrote what.
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.lang.reflect.Field;
import java.lang.reflect.Method;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.Future;

import org.apache.kafka.clients.consumer.ConsumerGroupMetadata;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public class ProducerBridge {
    static KafkaProducer<byte[], byte[]> producer;
    static final List<Future<RecordMetadata>> pending = new ArrayList<>();
    static final List<String> pendingDesc = new ArrayList<>();

    public static void main(String[] args) throws Exception {
        Properties props = new Properties();
        for (String a : args) {
            int i = a.indexOf('=');
            props.put(a.substring(0, i), a.substring(i + 1));
        }
        producer = new KafkaProducer<>(props, new ByteArraySerializer(), new ByteArraySerializer());
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        reply("\"ready\":true");
        while ((line = in.readLine()) != null) {
            String[] w = line.trim().split(" ");
            try {
                switch (w[0]) {
                    case "init": producer.initTransactions(); reply(""); break;
                    case "begin": producer.beginTransaction(); reply(""); break;
                    case "send": {
                        ProducerRecord<byte[], byte[]> r = new ProducerRecord<>(w[1], Integer.parseInt(w[2]), null,
                                w[3].getBytes(StandardCharsets.UTF_8));
                        pending.add(producer.send(r));
                        pendingDesc.add(w[3]);
                        reply("");
                        break;
                    }
                    case "sendkv": {
                        byte[] v = "~null".equals(w[4]) ? null : w[4].getBytes(StandardCharsets.UTF_8);
                        ProducerRecord<byte[], byte[]> r = new ProducerRecord<>(w[1], Integer.parseInt(w[2]),
                                w[3].getBytes(StandardCharsets.UTF_8), v);
                        pending.add(producer.send(r));
                        pendingDesc.add(w[3] + "=" + w[4]);
                        reply("");
                        break;
                    }
                    case "flush": {
                        producer.flush();
                        StringBuilder sb = new StringBuilder("\"records\":[");
                        for (int i = 0; i < pending.size(); i++) {
                            RecordMetadata m = pending.get(i).get();
                            if (i > 0) sb.append(',');
                            sb.append("{\"topic\":\"").append(m.topic()).append("\",\"partition\":").append(m.partition())
                              .append(",\"offset\":").append(m.offset()).append(",\"value\":\"").append(pendingDesc.get(i))
                              .append("\"}");
                        }
                        sb.append(']');
                        pending.clear();
                        pendingDesc.clear();
                        reply(sb.toString());
                        break;
                    }
                    case "sendoffsets": {
                        Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>();
                        offsets.put(new TopicPartition(w[2], Integer.parseInt(w[3])), new OffsetAndMetadata(Long.parseLong(w[4])));
                        producer.sendOffsetsToTransaction(offsets, new ConsumerGroupMetadata(w[1]));
                        reply("");
                        break;
                    }
                    case "commit": producer.commitTransaction(); reply(""); break;
                    case "abort": producer.abortTransaction(); reply(""); break;
                    case "state": reply(""); break;
                    case "init2pc": {
                        Object tm = transactionManager();
                        Object result;
                        int patched = 0;
                        synchronized (tm) {
                            result = tm.getClass().getMethod("initializeTransactions", boolean.class).invoke(tm, false);
                            Field q = tm.getClass().getDeclaredField("pendingRequests");
                            q.setAccessible(true);
                            for (Object h : (java.util.Collection<?>) q.get(tm)) {
                                if (!h.getClass().getSimpleName().equals("InitProducerIdHandler")) continue;
                                Field bf = h.getClass().getDeclaredField("builder");
                                bf.setAccessible(true);
                                Object b = bf.get(h);
                                Field df = b.getClass().getDeclaredField("data");
                                df.setAccessible(true);
                                // by reflection: the 3.5.2 jars (legacy scenarios) have no Enable2Pc to compile against
                                Object data = df.get(b);
                                data.getClass().getMethod("setEnable2Pc", boolean.class).invoke(data, true);
                                // AbstractRequest.Builder(ApiKeys) caps at the latest *stable* version (5)
                                Field lf = b.getClass().getSuperclass().getDeclaredField("latestAllowedVersion");
                                lf.setAccessible(true);
                                Class<?> keys = Class.forName("org.apache.kafka.common.protocol.ApiKeys");
                                Object initPid = keys.getField("INIT_PRODUCER_ID").get(null);
                                lf.setShort(b, (Short) keys.getMethod("latestVersion", boolean.class).invoke(initPid, true));
                                patched++;
                            }
                        }
                        if (patched != 1) throw new IllegalStateException("InitProducerId requests queued: " + patched);
                        Field sf = KafkaProducer.class.getDeclaredField("sender");
                        sf.setAccessible(true);
                        Object sender = sf.get(producer);
                        sender.getClass().getMethod("wakeup").invoke(sender);
                        result.getClass().getMethod("await", long.class, java.util.concurrent.TimeUnit.class, String.class)
                              .invoke(result, 60000L, java.util.concurrent.TimeUnit.MILLISECONDS, "InitTransactions");
                        Method v2 = tm.getClass().getDeclaredMethod("maybeUpdateTransactionV2Enabled", boolean.class);
                        v2.setAccessible(true);
                        v2.invoke(tm, true);
                        reply("");
                        break;
                    }
                    case "prepare": {
                        producer.flush();
                        Object tm = transactionManager();
                        tm.getClass().getMethod("prepareTransaction").invoke(tm);
                        reply("\"prepared\":\"" + preparedState(tm) + "\"");
                        break;
                    }
                    case "complete": {
                        Object tm = transactionManager();
                        String prepared = preparedState(tm);
                        boolean commit = prepared.equals(w[1]);
                        if (commit) producer.commitTransaction(); else producer.abortTransaction();
                        reply("\"completed\":\"" + (commit ? "commit" : "abort") + "\"");
                        break;
                    }
                    case "halt": reply("\"halting\":true"); Runtime.getRuntime().halt(0); break;
                    case "close": producer.close(); reply("\"closed\":true"); return;
                    default: reply("\"ok\":false,\"error\":\"unknown command " + w[0] + "\"");
                }
            } catch (Exception e) {
                Throwable c = e;
                while ((c instanceof java.util.concurrent.ExecutionException
                        || c instanceof java.lang.reflect.InvocationTargetException) && c.getCause() != null) c = c.getCause();
                reply("\"ok\":false,\"error\":\"" + (c.getClass().getName() + ": " + c.getMessage()).replace("\\", "/").replace("\"", "'") + "\"");
            }
        }
    }

    static Object transactionManager() throws Exception {
        Field f = KafkaProducer.class.getDeclaredField("transactionManager");
        f.setAccessible(true);
        return f.get(producer);
    }

    // TransactionManager.preparedTransactionState() as PreparedTxnState.toString() writes it: "id:epoch"
    static String preparedState(Object tm) throws Exception {
        Object pe = tm.getClass().getMethod("preparedTransactionState").invoke(tm);
        if (pe == null) return "";
        return pe.getClass().getField("producerId").getLong(pe) + ":" + pe.getClass().getField("epoch").getShort(pe);
    }

    static void reply(String body) throws Exception {
        long pid = -1;
        short epoch = -1;
        boolean tv2 = false;
        Field f = KafkaProducer.class.getDeclaredField("transactionManager");
        f.setAccessible(true);
        Object tm = f.get(producer);
        if (tm != null) {
            Method m = tm.getClass().getDeclaredMethod("producerIdAndEpoch");
            m.setAccessible(true);
            Object pe = m.invoke(tm);
            pid = pe.getClass().getField("producerId").getLong(pe);
            epoch = pe.getClass().getField("epoch").getShort(pe);
            try {
                tv2 = (Boolean) tm.getClass().getMethod("isTransactionV2Enabled").invoke(tm);
            } catch (NoSuchMethodException e) {
                tv2 = false;  // clients before 4.0 know only transaction versions 0/1
            }
        }
        String prefix = "{\"producer_id\":" + pid + ",\"producer_epoch\":" + epoch + ",\"tv2\":" + tv2;
        System.out.println(prefix + (body.isEmpty() ? "" : "," + body) + (body.contains("\"ok\"") ? "" : ",\"ok\":true") + "}");
        System.out.flush();
    }
}

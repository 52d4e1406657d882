// A line-protocol bridge to Kafka's own Java producer, driven from Python (scripts/kafka/harness.py,
// JavaProducer). Why: only the Java client of Kafka 4.x speaks transaction version 2 (KIP-890 part 2:
// no AddPartitionsToTxn, epoch bump on every EndTxn); librdkafka and kafka-python stay on TV0/TV1.
//
// Run with the JDK's source launcher (no build step):
//   java -cp 'build/kafka/4.3.1/libs/*' scripts/kafka/java/ProducerBridge.java key=value...
// Arguments are producer configs. Commands on stdin, one per line; one JSON object per line on stdout:
//   init | begin | commit | abort | flush | state | close
//   send TOPIC PARTITION VALUE        (value is a token without spaces; key is null)
//   sendkv TOPIC PARTITION KEY VALUE  (key and value are tokens; VALUE ~null sends a null value: a tombstone)
// Every reply carries the producer id/epoch the client holds (read by reflection: the Java producer
// has no public accessor), so the Python side can record which identity wrote what.
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.lang.reflect.Field;
import java.lang.reflect.Method;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.Future;

import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
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
                    case "commit": producer.commitTransaction(); reply(""); break;
                    case "abort": producer.abortTransaction(); reply(""); break;
                    case "state": reply(""); break;
                    case "close": producer.close(); reply("\"closed\":true"); return;
                    default: reply("\"ok\":false,\"error\":\"unknown command " + w[0] + "\"");
                }
            } catch (Exception e) {
                Throwable c = e.getCause() != null && e instanceof java.util.concurrent.ExecutionException ? e.getCause() : e;
                reply("\"ok\":false,\"error\":\"" + (c.getClass().getName() + ": " + c.getMessage()).replace("\\", "/").replace("\"", "'") + "\"");
            }
        }
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

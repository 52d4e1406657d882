// Kafka's own RemoteLogMetadataSerde (kafka-storage, the serde TopicBasedRemoteLogMetadataManager uses
// for __remote_log_metadata values) as a test oracle, run by the JDK's source launcher on the jars of
// scripts/kafka/fetch.sh (like LogStateOracle.java).
//
//   java -cp <kafka jars> RemoteLogMetadataSerdeTool.java fixtures   one JSON line per serialized object:
//                                                                  every record type, every state, with and
//                                                                  without custom metadata / txn index flag
//   java -cp <kafka jars> RemoteLogMetadataSerdeTool.java decode     hex values on stdin -> one JSON line each
//
// Both print {"type", "hex", "topic", "topic_id", "partition", "segment_id", "start_offset", "end_offset",
// "broker_id", "max_timestamp_ms", "event_timestamp_ms", "leader_epochs": [[epoch, offset]...],
// "segment_size_in_bytes", "custom_metadata": hex|null, "state", "txn_index_empty"} (absent fields null),
// read from the Java objects' getters.
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.util.ArrayList;
import java.util.HexFormat;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.TreeMap;

import org.apache.kafka.common.TopicIdPartition;
import org.apache.kafka.common.Uuid;
import org.apache.kafka.server.log.remote.metadata.storage.RemoteLogSegmentMetadataSnapshot;
import org.apache.kafka.server.log.remote.metadata.storage.serialization.RemoteLogMetadataSerde;
import org.apache.kafka.server.log.remote.storage.RemoteLogMetadata;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentId;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentMetadata;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentMetadataUpdate;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentState;
import org.apache.kafka.server.log.remote.storage.RemotePartitionDeleteMetadata;
import org.apache.kafka.server.log.remote.storage.RemotePartitionDeleteState;

public class RemoteLogMetadataSerdeTool {
    static final HexFormat HEX = HexFormat.of();

    static String q(Object v) {
        if (v == null) return "null";
        if (v instanceof Number || v instanceof Boolean) return v.toString();
        return "\"" + v.toString().replace("\\", "\\\\").replace("\"", "\\\"") + "\"";
    }

    static String json(RemoteLogMetadata m, byte[] bytes) {
        Map<String, Object> o = new LinkedHashMap<>();
        o.put("type", m.getClass().getSimpleName());
        o.put("hex", HEX.formatHex(bytes));
        TopicIdPartition tip = null;
        if (!(m instanceof RemoteLogSegmentMetadataSnapshot)) tip = m.topicIdPartition();
        o.put("topic", tip == null ? null : tip.topic());
        o.put("topic_id", tip == null ? null : tip.topicId().toString());
        o.put("partition", tip == null ? null : tip.partition());
        o.put("broker_id", m.brokerId());
        o.put("event_timestamp_ms", m.eventTimestampMs());
        String epochs = null;
        if (m instanceof RemoteLogSegmentMetadata s) {
            o.put("segment_id", s.remoteLogSegmentId().id().toString());
            o.put("start_offset", s.startOffset());
            o.put("end_offset", s.endOffset());
            o.put("max_timestamp_ms", s.maxTimestampMs());
            o.put("segment_size_in_bytes", s.segmentSizeInBytes());
            o.put("custom_metadata", s.customMetadata().map(c -> HEX.formatHex(c.value())).orElse(null));
            o.put("state", s.state().name());
            o.put("txn_index_empty", s.isTxnIdxEmpty());
            epochs = epochs(s.segmentLeaderEpochs());
        } else if (m instanceof RemoteLogSegmentMetadataSnapshot s) {
            o.put("segment_id", s.segmentId().toString());
            o.put("start_offset", s.startOffset());
            o.put("end_offset", s.endOffset());
            o.put("max_timestamp_ms", s.maxTimestampMs());
            o.put("segment_size_in_bytes", s.segmentSizeInBytes());
            o.put("custom_metadata", s.customMetadata().map(c -> HEX.formatHex(c.value())).orElse(null));
            o.put("state", s.state().name());
            o.put("txn_index_empty", s.isTxnIdxEmpty());
            epochs = epochs(s.segmentLeaderEpochs());
        } else if (m instanceof RemoteLogSegmentMetadataUpdate u) {
            o.put("segment_id", u.remoteLogSegmentId().id().toString());
            o.put("custom_metadata", u.customMetadata().map(c -> HEX.formatHex(c.value())).orElse(null));
            o.put("state", u.state().name());
        } else if (m instanceof RemotePartitionDeleteMetadata d) {
            o.put("state", d.state().name());
        }
        StringBuilder sb = new StringBuilder("{");
        for (Map.Entry<String, Object> e : o.entrySet()) sb.append(q(e.getKey())).append(":").append(q(e.getValue())).append(",");
        sb.append("\"leader_epochs\":").append(epochs == null ? "null" : epochs).append("}");
        return sb.toString();
    }

    static String epochs(Map<Integer, Long> m) {
        List<String> parts = new ArrayList<>();
        for (Map.Entry<Integer, Long> e : m.entrySet()) parts.add("[" + e.getKey() + "," + e.getValue() + "]");
        return "[" + String.join(",", parts) + "]";
    }

    static List<RemoteLogMetadata> fixtures() {
        TopicIdPartition tp = new TopicIdPartition(Uuid.fromString("byNkDA1GSAeMuXGiZiIRFw"), 3, "payments");
        TopicIdPartition tp2 = new TopicIdPartition(Uuid.fromString("AAAAAAAAAAAAAAAAAAAAAQ"), 0, "t\u00e9st-\u00fcnicode");
        RemoteLogSegmentId id = new RemoteLogSegmentId(tp, Uuid.fromString("f9GnMw0qTASR4BHEq5uRGw"));
        RemoteLogSegmentId id2 = new RemoteLogSegmentId(tp2, Uuid.fromString("PylH48E5Q-uALB2acOrBYw"));
        Map<Integer, Long> one = new TreeMap<>(Map.of(0, 0L));
        Map<Integer, Long> three = new TreeMap<>(Map.of(2, 100L, 5, 170L, 7, 199L));
        Optional<RemoteLogSegmentMetadata.CustomMetadata> none = Optional.empty();
        Optional<RemoteLogSegmentMetadata.CustomMetadata> custom =
            Optional.of(new RemoteLogSegmentMetadata.CustomMetadata(new byte[] {1, 2, 3, (byte) 0xff}));
        List<RemoteLogMetadata> out = new ArrayList<>();
        for (RemoteLogSegmentState st : RemoteLogSegmentState.values()) {
            out.add(new RemoteLogSegmentMetadata(id, 100L, 199L, 1764000000123L, 1, 1764000000456L, 16384, none, st, three, false));
            out.add(new RemoteLogSegmentMetadataUpdate(id, 1764000001000L, none, st, 2));
            out.add(new RemoteLogSegmentMetadataSnapshot(id.id(), 0L, 12L, 1764000000000L, 3, 1764000000001L, 951, none, st, one, true));
        }
        out.add(new RemoteLogSegmentMetadata(id2, 0L, 0L, -1L, 0, 0L, 0, custom, RemoteLogSegmentState.COPY_SEGMENT_STARTED, one, true));
        out.add(new RemoteLogSegmentMetadataUpdate(id2, 5L, custom, RemoteLogSegmentState.COPY_SEGMENT_FINISHED, 7));
        out.add(new RemoteLogSegmentMetadataSnapshot(id2.id(), Long.MAX_VALUE - 1, Long.MAX_VALUE, 0L, Integer.MAX_VALUE, 0L,
            Integer.MAX_VALUE, custom, RemoteLogSegmentState.DELETE_SEGMENT_FINISHED, three, false));
        for (RemotePartitionDeleteState st : RemotePartitionDeleteState.values()) {
            out.add(new RemotePartitionDeleteMetadata(tp, st, 1764000002000L, 1));
            out.add(new RemotePartitionDeleteMetadata(tp2, st, 0L, 0));
        }
        return out;
    }

    public static void main(String[] args) throws Exception {
        RemoteLogMetadataSerde serde = new RemoteLogMetadataSerde();
        if (args.length > 0 && args[0].equals("fixtures")) {
            for (RemoteLogMetadata m : fixtures()) System.out.println(json(m, serde.serialize(m)));
            return;
        }
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
        String line;
        while ((line = in.readLine()) != null) {
            line = line.trim();
            if (line.isEmpty()) continue;
            byte[] bytes = HEX.parseHex(line);
            System.out.println(json(serde.deserialize(bytes), bytes));
        }
    }
}

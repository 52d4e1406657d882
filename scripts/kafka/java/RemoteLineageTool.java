/*
 * Kafka's own leader-epoch lineage check of a remote segment, for the differential test of
 * auditor.model.remote.within_leader_epochs (tests/test_tiered_storage.py).
 *
 * Reads lines "SEG_EPOCHS;SEGMENT_END_OFFSET;LOG_END_OFFSET;LEADER_EPOCHS" (epochs as
 * "epoch:offset,epoch:offset"), prints "true"/"false" per line: the answer of
 * RemoteLogManager.isRemoteSegmentWithinLeaderEpochs (kafka-storage; package-private static,
 * called by reflection) for a RemoteLogSegmentMetadata with those segment leader epochs and end
 * offset, given the replica's leader epochs filtered by RemoteLogManager.buildFilteredLeaderEpochMap
 * as the broker's callers (RLMExpirationTask, findOffsetByTimestamp) pass them.
 *
 * Run with the JDK source launcher: java -cp <kafka libs>/'*' RemoteLineageTool.java < cases
 */

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.lang.reflect.Method;
import java.util.NavigableMap;
import java.util.TreeMap;

import org.apache.kafka.common.TopicIdPartition;
import org.apache.kafka.common.Uuid;
import org.apache.kafka.server.log.remote.storage.RemoteLogManager;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentId;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentMetadata;

public class RemoteLineageTool {
    static TreeMap<Integer, Long> epochs(String s) {
        TreeMap<Integer, Long> m = new TreeMap<>();
        if (s.isEmpty()) return m;
        for (String e : s.split(",")) {
            String[] kv = e.split(":");
            m.put(Integer.parseInt(kv[0]), Long.parseLong(kv[1]));
        }
        return m;
    }

    public static void main(String[] args) throws Exception {
        Method check = RemoteLogManager.class.getDeclaredMethod("isRemoteSegmentWithinLeaderEpochs",
                RemoteLogSegmentMetadata.class, long.class, NavigableMap.class);
        check.setAccessible(true);
        Method filter = RemoteLogManager.class.getDeclaredMethod("buildFilteredLeaderEpochMap", NavigableMap.class);
        filter.setAccessible(true);
        TopicIdPartition tp = new TopicIdPartition(Uuid.randomUuid(), 0, "t");
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
        String line;
        while ((line = in.readLine()) != null) {
            if (line.isBlank()) continue;
            String[] f = line.split(";", -1);
            TreeMap<Integer, Long> seg = epochs(f[0]);
            long end = Long.parseLong(f[1]);
            long logEnd = Long.parseLong(f[2]);
            @SuppressWarnings("unchecked")
            NavigableMap<Integer, Long> lineage = (NavigableMap<Integer, Long>) filter.invoke(null, epochs(f[3]));
            long start = seg.firstEntry().getValue();
            RemoteLogSegmentMetadata md = new RemoteLogSegmentMetadata(new RemoteLogSegmentId(tp, Uuid.randomUuid()),
                    start, end, 0L, 1, 0L, 100, seg);
            System.out.println(check.invoke(null, md, logEnd, lineage));
        }
    }
}

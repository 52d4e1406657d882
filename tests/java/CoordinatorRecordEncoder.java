// Encodes coordinator records with Kafka's own generated classes, for tests/test_group_records.py.
//
// stdin, one line per record: "<package> <MessageName> <version> <json>", e.g.
//   group ConsumerGroupMemberMetadataValue 0 {"instanceId":null,...}
// The message is built by Kafka's <MessageName>JsonConverter.read (package
// org.apache.kafka.coordinator.<package>.generated) and written as the coordinators write it
// (CoordinatorRecordSerde): a *Key with MessageUtil.toCoordinatorTypePrefixedBytes (int16 record
// type + key), a *Value with MessageUtil.toVersionPrefixedBytes (int16 version + value).
// stdout, one line per record: "<hex> <JsonConverter.write of the same message>".
// Run with the source launcher: java -cp "<kafka libs>/*" CoordinatorRecordEncoder.java
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.lang.reflect.Method;
import java.nio.charset.StandardCharsets;
import java.util.HexFormat;
import org.apache.kafka.common.protocol.ApiMessage;
import org.apache.kafka.common.protocol.MessageUtil;

public class CoordinatorRecordEncoder {
    public static void main(String[] args) throws Exception {
        ObjectMapper mapper = new ObjectMapper();
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            if (line.isBlank()) continue;
            String[] parts = line.split(" ", 4);
            String pkg = "org.apache.kafka.coordinator." + parts[0] + ".generated.";
            String name = parts[1];
            short version = Short.parseShort(parts[2]);
            JsonNode json = mapper.readTree(parts[3]);
            Class<?> msgClass = Class.forName(pkg + name);
            Class<?> conv = Class.forName(pkg + name + "JsonConverter");
            Method read = conv.getMethod("read", JsonNode.class, short.class);
            Method write = conv.getMethod("write", msgClass, short.class);
            ApiMessage msg = (ApiMessage) read.invoke(null, json, version);
            byte[] bytes = name.endsWith("Key") ? MessageUtil.toCoordinatorTypePrefixedBytes(msg)
                : MessageUtil.toVersionPrefixedBytes(version, msg);
            System.out.println(HexFormat.of().formatHex(bytes) + " " + write.invoke(null, msg, version));
        }
    }
}

// Kafka's own encoding of every __cluster_metadata record type, for the differential test of the
// auditor's metadata decoder (tests/test_metadata_kafka.py). Run with the JDK's source launcher on a
// version's jars, like ProducerBridge.java:
//   java -cp 'build/kafka/4.4.0/libs/*' scripts/kafka/java/MetadataRecordSamples.java
// For every MetadataRecordType (kafka-metadata's generated enum) and every version it supports, one
// JSON line on stdout: {"api_key", "type", "version", "value_hex", "json"}. value_hex is the record
// value as the controller appends it (MetadataRecordSerde: uvarint frame version 1, uvarint api key,
// uvarint version, then the generated message's write()); json is the generated <Name>JsonConverter's
// rendering, which is what kafka-dump-log --cluster-metadata-decoder prints as "data".
// The message is the generated class's default, then every scalar setter (int8/16/32/64, bool, string,
// uuid) is given a distinct non-default value one at a time, kept only if write() accepts it at that
// version (a field the version lacks must keep its default). Nested structs and arrays stay empty.
import java.lang.reflect.Method;
import java.lang.reflect.Modifier;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;

import org.apache.kafka.common.Uuid;
import org.apache.kafka.common.metadata.MetadataRecordType;
import org.apache.kafka.common.protocol.ApiMessage;
import org.apache.kafka.common.protocol.ByteBufferAccessor;
import org.apache.kafka.common.protocol.ObjectSerializationCache;

public class MetadataRecordSamples {
    static final ObjectMapper JSON = new ObjectMapper();

    public static void main(String[] args) throws Exception {
        for (MetadataRecordType t : MetadataRecordType.values()) {
            for (short v = t.lowestSupportedVersion(); v <= t.highestSupportedVersion(); v++) {
                ApiMessage m = filled(t, v);
                ObjectNode o = JSON.createObjectNode();
                o.put("api_key", t.id());
                o.put("type", t.toString());
                o.put("version", v);
                o.put("value_hex", hex(frame(m, t.id(), v)));
                Class<?> conv = Class.forName(m.getClass().getName() + "JsonConverter");
                o.set("json", (JsonNode) conv.getMethod("write", m.getClass(), short.class).invoke(null, m, v));
                System.out.println(o);
            }
        }
    }

    /** MetadataRecordSerde's framing: frame version 1, api key, version (uvarints), then the body. */
    static byte[] frame(ApiMessage m, short apiKey, short version) {
        ObjectSerializationCache cache = new ObjectSerializationCache();
        int body = m.size(cache, version);
        ByteBuffer buf = ByteBuffer.allocate(15 + body);
        ByteBufferAccessor w = new ByteBufferAccessor(buf);  // Writable's varints: ByteUtils moved in 4.4.0
        w.writeUnsignedVarint(1);
        w.writeUnsignedVarint(apiKey);
        w.writeUnsignedVarint(version);
        m.write(w, cache, version);
        byte[] out = new byte[buf.position()];
        buf.flip();
        buf.get(out);
        return out;
    }

    static boolean writes(ApiMessage m, short version) {
        try {
            frame(m, m.apiKey(), version);
            return true;
        } catch (RuntimeException e) {
            return false;
        }
    }

    static ApiMessage filled(MetadataRecordType t, short version) throws Exception {
        ApiMessage m = t.newMetadataRecord();
        List<Method> setters = new ArrayList<>();
        for (Method s : m.getClass().getMethods()) {
            if (s.getName().startsWith("set") && s.getParameterCount() == 1 && !Modifier.isStatic(s.getModifiers())) setters.add(s);
        }
        setters.sort(Comparator.comparing(Method::getName));
        int n = 0;
        for (Method s : setters) {
            Class<?> p = s.getParameterTypes()[0];
            Object value;
            n++;
            if (p == int.class) value = 1000 + n;
            else if (p == long.class) value = 1_000_000_000_000L + n;
            else if (p == short.class) value = (short) (100 + n);
            else if (p == byte.class) value = (byte) (1 + n % 100);
            else if (p == boolean.class) value = !((Boolean) getter(m, s).invoke(m));
            else if (p == String.class) value = "s" + n + "-" + s.getName().substring(3);
            else if (p == Uuid.class) value = new Uuid(0x1234_5678_0000_0000L + n, 0x0abc_0000_0000_0000L + n);
            else continue;
            Object before = getter(m, s).invoke(m);
            s.invoke(m, value);
            if (!writes(m, version)) s.invoke(m, before);  // the field is not in this version: keep the default
        }
        return m;
    }

    static Method getter(ApiMessage m, Method setter) throws NoSuchMethodException {
        String name = setter.getName().substring(3);
        return m.getClass().getMethod(Character.toLowerCase(name.charAt(0)) + name.substring(1));
    }

    static String hex(byte[] b) {
        StringBuilder sb = new StringBuilder();
        for (byte x : b) sb.append(String.format("%02x", x));
        return sb.toString();
    }
}

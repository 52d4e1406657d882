// A single-host HDFS for tests: one NameNode and one DataNode of Apache Hadoop (the hadoop-hdfs
// jars scripts/hdfs/fetch.sh resolves from Maven Central), in this JVM, on 127.0.0.1 with free ports.
// Driven by scripts/hdfs/harness.py. Run with the JDK's source launcher (no build step):
//   java -cp 'build/hdfs/jars/*' scripts/hdfs/MiniHdfs.java WORKDIR
// WORKDIR gets name/ and data/ (formatted on every start: the file system starts empty).
// Prints one line "READY hdfs://127.0.0.1:<port> <namenode http port>" on stdout once the DataNode
// has registered and the NameNode has left safe mode; then stops both (and exits) when stdin closes.
// stdout carries nothing else: System.out is redirected to stderr, where the daemons log.
import java.io.File;
import java.io.FileDescriptor;
import java.io.FileOutputStream;
import java.io.PrintStream;
import java.net.InetSocketAddress;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.hdfs.HdfsConfiguration;
import org.apache.hadoop.hdfs.protocol.HdfsConstants.SafeModeAction;
import org.apache.hadoop.hdfs.server.datanode.DataNode;
import org.apache.hadoop.hdfs.server.namenode.NameNode;
import org.apache.hadoop.metrics2.lib.DefaultMetricsSystem;
import org.apache.log4j.ConsoleAppender;
import org.apache.log4j.Level;
import org.apache.log4j.Logger;
import org.apache.log4j.PatternLayout;

public class MiniHdfs {
    public static void main(String[] args) throws Exception {
        if (args.length != 1) {
            System.err.println("usage: MiniHdfs WORKDIR");
            System.exit(2);
        }
        PrintStream out = new PrintStream(new FileOutputStream(FileDescriptor.out), true, "UTF-8");
        System.setOut(System.err);
        Logger root = Logger.getRootLogger();
        root.setLevel(Level.toLevel(System.getProperty("minihdfs.log.level", "WARN")));
        root.addAppender(new ConsoleAppender(new PatternLayout("%d{HH:mm:ss.SSS} %p %c{1}: %m%n"), "System.err"));
        // the NameNode is formatted and started in one JVM: both register the same metrics sources
        DefaultMetricsSystem.setMiniClusterMode(true);
        File work = new File(args[0]).getAbsoluteFile();
        Configuration conf = new HdfsConfiguration();
        conf.set("hadoop.tmp.dir", new File(work, "tmp").getPath());
        conf.set("dfs.namenode.name.dir", new File(work, "name").toURI().toString());
        conf.set("dfs.datanode.data.dir", new File(work, "data").toURI().toString());
        conf.set("fs.defaultFS", "hdfs://127.0.0.1:0");
        conf.set("dfs.namenode.rpc-address", "127.0.0.1:0");
        conf.set("dfs.namenode.http-address", "127.0.0.1:0");
        conf.set("dfs.namenode.secondary.http-address", "127.0.0.1:0");
        conf.set("dfs.datanode.address", "127.0.0.1:0");
        conf.set("dfs.datanode.http.address", "127.0.0.1:0");
        conf.set("dfs.datanode.ipc.address", "127.0.0.1:0");
        conf.set("dfs.datanode.hostname", "127.0.0.1");
        conf.set("dfs.replication", "1");
        conf.set("dfs.permissions.enabled", "false");
        conf.set("dfs.namenode.safemode.extension", "0");
        conf.set("dfs.namenode.safemode.min.datanodes", "0");
        conf.set("dfs.namenode.fs-limits.min-block-size", "0");
        conf.set("dfs.heartbeat.interval", "1");
        conf.set("dfs.namenode.heartbeat.recheck-interval", "5000");
        conf.set("dfs.datanode.scan.period.hours", "-1");
        conf.set("dfs.block.scanner.volume.bytes.per.second", "0");
        conf.set("dfs.datanode.du.reserved", "0");
        conf.set("dfs.namenode.resource.du.reserved", "0");
        conf.set("dfs.namenode.audit.log.async", "false");
        // one DataNode: a replacement DataNode for an append pipeline can never be found
        conf.set("dfs.client.block.write.replace-datanode-on-failure.enable", "false");

        NameNode.format(conf);
        NameNode nn = NameNode.createNameNode(new String[0], conf);
        InetSocketAddress rpc = nn.getNameNodeAddress();
        String uri = "hdfs://127.0.0.1:" + rpc.getPort();
        conf.set("fs.defaultFS", uri);
        conf.set("dfs.namenode.rpc-address", "127.0.0.1:" + rpc.getPort());
        DataNode dn = DataNode.createDataNode(new String[0], conf);
        long deadline = System.currentTimeMillis() + 120_000;
        while (nn.getNamesystem().getNumLiveDataNodes() < 1 || !dn.isDatanodeFullyStarted()) {
            if (System.currentTimeMillis() > deadline) throw new IllegalStateException("the DataNode did not register");
            Thread.sleep(50);
        }
        nn.getRpcServer().setSafeMode(SafeModeAction.SAFEMODE_LEAVE, false);
        out.println("READY " + uri + " " + nn.getHttpAddress().getPort());

        Runtime.getRuntime().addShutdownHook(new Thread(() -> stop(dn, nn)));
        while (System.in.read() >= 0) { }
        stop(dn, nn);
        System.exit(0);
    }

    private static synchronized void stop(DataNode dn, NameNode nn) {
        try { dn.shutdown(); } catch (Throwable t) { }
        try { nn.stop(); nn.join(); } catch (Throwable t) { }
    }
}

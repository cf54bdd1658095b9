package hdfsfuse.minidfs;

import java.io.File;
import java.io.InputStream;
import java.io.PrintStream;
import org.apache.hadoop.crypto.key.kms.server.MiniKMS;

/**
 * A Hadoop KMS for a kms test cluster, alone in its JVM (Hadoop 3.4.2 jars: see the pom's kms profile).
 *
 * <p>Arguments: the KMS conf dir (kms-site.xml and kms-acls.xml written by the harness beforehand;
 * MiniKMS keeps them), a port (0: any), and for https a JKS key store and its password. Prints one
 * JSON line, {"url": ...}, on stdout, then serves until stdin closes. Everything else the KMS logs
 * goes to stderr.
 */
public final class KmsMain {
  private KmsMain() {}

  public static void main(String[] args) throws Exception {
    PrintStream out = System.out;
    System.setOut(System.err);  // the KMS's log4j console appender writes to System.out
    MiniKMS.Builder builder = new MiniKMS.Builder().setKmsConfDir(new File(args[0]));
    int port = Integer.parseInt(args[1]);
    if (port > 0) {
      builder.setPort(port);
    }
    if (args.length >= 4) {
      builder.setSslConf(new File(args[2]), args[3]);
    }
    MiniKMS kms = builder.build();
    try {
      kms.start();
    } catch (Exception e) {
      e.printStackTrace();
      out.println("{\"error\": \"the KMS did not start: " + String.valueOf(e).replace("\"", "'") + "\"}");
      out.flush();
      Runtime.getRuntime().halt(1);  // Jetty's threads would keep a failed KMS's JVM alive
    }
    out.println("{\"url\": \"" + kms.getKMSUrl() + "\"}");
    out.flush();
    InputStream in = System.in;
    while (in.read() >= 0) {
      // serve until the harness closes stdin
    }
    Runtime.getRuntime().halt(0);  // at once, as a crashed KMS would go (its key store is on disk)
  }
}

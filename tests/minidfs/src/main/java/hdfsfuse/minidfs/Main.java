package hdfsfuse.minidfs;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.BufferedReader;
import java.io.File;
import java.io.FileInputStream;
import java.io.FileOutputStream;
import java.io.InputStream;
import java.io.InputStreamReader;
import java.io.OutputStream;
import java.io.PrintStream;
import java.io.RandomAccessFile;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FSDataInputStream;
import org.apache.hadoop.fs.FSDataOutputStream;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.permission.FsPermission;
import org.apache.hadoop.hdfs.DistributedFileSystem;
import org.apache.hadoop.hdfs.MiniDFSCluster;
import org.apache.hadoop.hdfs.MiniDFSNNTopology;
import org.apache.hadoop.hdfs.protocol.AddErasureCodingPolicyResponse;
import org.apache.hadoop.hdfs.protocol.DatanodeInfo;
import org.apache.hadoop.hdfs.protocol.ErasureCodingPolicy;
import org.apache.hadoop.hdfs.protocol.ExtendedBlock;
import org.apache.hadoop.hdfs.protocol.HdfsFileStatus;
import org.apache.hadoop.hdfs.protocol.LocatedBlock;
import org.apache.hadoop.hdfs.protocol.LocatedBlocks;
import org.apache.hadoop.hdfs.protocol.LocatedStripedBlock;
import org.apache.hadoop.hdfs.server.datanode.DataNode;
import org.apache.hadoop.hdfs.server.namenode.NameNode;
import org.apache.hadoop.hdfs.util.StripedBlockUtil;
import org.apache.hadoop.io.erasurecode.ECSchema;
import org.apache.hadoop.metrics2.MetricsRecordBuilder;
import org.apache.hadoop.test.MetricsAsserts;

/**
 * Starts a MiniDFSCluster for hdfsfuse tests and serves a JSON-lines control protocol.
 *
 * <p>stdout carries exactly one ready line, then one JSON reply per stdin command. Everything
 * else (Hadoop's logs) goes to stderr. EOF on stdin shuts the cluster down.
 */
public final class Main {
  private static final ObjectMapper JSON = new ObjectMapper();
  private static final String NAMESERVICE = "ns1";

  private final Options opts;
  private final PrintStream out;
  private MiniDFSCluster cluster;
  private Configuration conf;
  private Secure secure;
  private Front router;
  private String routerAddress;
  // The namespace of the command being served: the scheme and authority of its path, when it
  // names one (hdfs://ns1/x, or a Router's address), else the default file system.
  private String commandFs;
  private final Map<String, StoppedDataNode> stopped = new HashMap<>();
  private final Map<String, FSDataOutputStream> openWriters = new HashMap<>();

  static final class Options {
    int datanodes = 3;
    long blockSize = 1024 * 1024;
    int replication = 3;
    String checksumType = "CRC32C";
    int bytesPerChecksum = 512;
    boolean ha = false;
    boolean observer = false;  // with ha: a third NameNode, an observer (HDFS-12943)
    String tailPeriod = "10ms";  // how often the observer applies the active's edits
    boolean blockTokens = false;
    // Minutes a block token and a data-encryption key stay valid (Hadoop's default is 600).
    long blockTokenLifetime = 0;
    boolean permissions = false;
    String baseDir = "target/minidfs";
    String datanodeHostname = "127.0.0.1";
    String resourceDir = null;
    boolean kerberos = false;
    String rpcProtection = "authentication";
    String dataTransferProtection = null;
    boolean encryptDataTransfer = false;
    long ticketLifetime = 0;
    String proxyUser = null;
    // Short-circuit local reads: a UNIX domain socket per DataNode in this directory (the JVM
    // runs with java.library.path at a libhadoop.so built from libhadoop-kit).
    String domainSocketDir = null;
    // Federation: this many nameservices ns0, ns1, ... (each an HA pair with --ha); 0 = one.
    int federation = 0;
    // A Router-based federation front over two subclusters (a launcher built on Hadoop 3.4.2).
    boolean router = false;
    // The KMS the NameNode asks for keys (kms://http@127.0.0.1:PORT/kms, started by the harness in
    // its own JVM); none: a file key store the NameNode alone can use.
    String kmsUri = null;

    static Options parse(String[] args) {
      Options o = new Options();
      for (int i = 0; i < args.length; i++) {
        String a = args[i];
        String v = (i + 1 < args.length) ? args[i + 1] : null;
        switch (a) {
          case "--datanodes": o.datanodes = Integer.parseInt(v); i++; break;
          case "--block-size": o.blockSize = Long.parseLong(v); i++; break;
          case "--replication": o.replication = Integer.parseInt(v); i++; break;
          case "--checksum-type": o.checksumType = v; i++; break;
          case "--bytes-per-checksum": o.bytesPerChecksum = Integer.parseInt(v); i++; break;
          case "--base-dir": o.baseDir = v; i++; break;
          case "--datanode-hostname": o.datanodeHostname = v; i++; break;
          case "--ha": o.ha = true; break;
          case "--observer": o.ha = true; o.observer = true; break;
          case "--observer-tail-period": o.tailPeriod = v; i++; break;
          case "--block-tokens": o.blockTokens = true; break;
          case "--block-token-lifetime": o.blockTokenLifetime = Long.parseLong(v); i++; break;
          case "--permissions": o.permissions = true; break;
          case "--resource-dir": o.resourceDir = v; i++; break;
          case "--kerberos": o.kerberos = true; break;
          case "--rpc-protection": o.rpcProtection = protection(v); i++; break;
          case "--data-transfer-protection": o.dataTransferProtection = protection(v); i++; break;
          case "--encrypt-data-transfer": o.encryptDataTransfer = true; break;
          case "--ticket-lifetime": o.ticketLifetime = Long.parseLong(v); i++; break;
          case "--proxy-user": o.proxyUser = v; i++; break;
          case "--domain-socket-dir": o.domainSocketDir = v; i++; break;
          case "--federation": o.federation = Integer.parseInt(v); i++; break;
          case "--router": o.router = true; break;
          case "--kms-uri": o.kmsUri = v; i++; break;
          default: throw new IllegalArgumentException("unknown launcher option: " + a);
        }
      }
      if (!o.checksumType.equals("CRC32C") && !o.checksumType.equals("CRC32")
          && !o.checksumType.equals("NULL")) {
        throw new IllegalArgumentException("checksum type must be CRC32C, CRC32 or NULL");
      }
      boolean secureOnly = o.dataTransferProtection != null || o.encryptDataTransfer
          || o.ticketLifetime != 0 || o.proxyUser != null || !o.rpcProtection.equals("authentication");
      if (secureOnly && !o.kerberos) {
        throw new IllegalArgumentException("security options need --kerberos");
      }
      if (o.ticketLifetime < 0 || (o.ticketLifetime > 0 && o.ticketLifetime < 10)) {
        throw new IllegalArgumentException("--ticket-lifetime must be at least 10 seconds");
      }
      if (o.blockTokenLifetime < 0 || (o.blockTokenLifetime > 0 && !o.blockTokens && !o.kerberos)) {
        throw new IllegalArgumentException("--block-token-lifetime takes minutes (1 or more) and needs"
            + " --block-tokens or --kerberos");
      }
      if (o.router && o.federation == 0) {
        o.federation = 2;
      }
      if (o.federation == 1 || o.federation < 0 || o.federation > 4) {
        throw new IllegalArgumentException("--federation takes 2 to 4 nameservices");
      }
      if (o.federation > 0 && (o.observer || o.kerberos)) {
        throw new IllegalArgumentException("--federation does not combine with --observer or --kerberos");
      }
      if (o.kerberos && o.resourceDir == null) {
        throw new IllegalArgumentException("--kerberos needs --resource-dir (a classpath directory)");
      }
      return o;
    }

    /** A comma list of authentication, integrity and privacy (hadoop.rpc.protection's syntax). */
    private static String protection(String v) {
      for (String level : v.split(",")) {
        if (!level.equals("authentication") && !level.equals("integrity") && !level.equals("privacy")) {
          throw new IllegalArgumentException("protection must be authentication, integrity or privacy: " + v);
        }
      }
      return v;
    }
  }

  private Main(Options opts, PrintStream out) {
    this.opts = opts;
    this.out = out;
  }

  public static void main(String[] args) throws Exception {
    // Keep stdout for the protocol only: anything Hadoop prints goes to stderr.
    PrintStream protocolOut = new PrintStream(new FileOutputStream(java.io.FileDescriptor.out), true, "UTF-8");
    System.setOut(System.err);
    Options opts;
    try {
      opts = Options.parse(args);
    } catch (RuntimeException e) {
      protocolOut.println(error("bad launcher arguments: " + e.getMessage()));
      System.exit(2);
      return;
    }
    Main m = new Main(opts, protocolOut);
    try {
      m.start();
    } catch (Exception e) {
      e.printStackTrace();
      protocolOut.println(error("cluster failed to start: " + e));
      System.exit(1);
    }
    m.serve();
    m.shutdown();
    System.exit(0);
  }

  private void start() throws Exception {
    File base = new File(opts.baseDir).getAbsoluteFile();
    if (opts.kerberos) {
      secure = new Secure(opts, base);
      secure.startKdc();  // before anything touches UGI: it sets java.security.krb5.conf
    }
    conf = new Configuration();
    conf.set(MiniDFSCluster.HDFS_MINIDFS_BASEDIR, base.getPath());
    conf.setLong("dfs.namenode.fs-limits.min-block-size", 1024);
    // Files of 100,000 small blocks (scale tests); the default cap is 10,000 blocks per file.
    conf.setLong("dfs.namenode.fs-limits.max-blocks-per-file", 1_000_000);
    conf.setLong("dfs.blocksize", opts.blockSize);
    conf.setInt("dfs.replication", opts.replication);
    conf.set("dfs.checksum.type", opts.checksumType);
    conf.setInt("dfs.bytes-per-checksum", opts.bytesPerChecksum);
    conf.setInt("dfs.datanode.scan.period.hours", -1);
    conf.setBoolean("dfs.block.access.token.enable", opts.blockTokens);
    if (opts.blockTokenLifetime > 0) {
      conf.setLong("dfs.block.access.token.lifetime", opts.blockTokenLifetime);
    }
    conf.setBoolean("dfs.permissions.enabled", opts.permissions);
    conf.setInt("dfs.safemode.extension", 0);
    conf.setInt("dfs.namenode.safemode.extension", 0);
    conf.setInt("dfs.heartbeat.interval", 1);
    // The KMS the harness started, else a file-based key store as the NameNode's KMS, so tests
    // can make encryption zones (only Java clients in this JVM can then read their files).
    conf.set("hadoop.security.key.provider.path", opts.kmsUri != null ? opts.kmsUri
        : "jceks://file" + new File(base, "keys.jceks").getAbsolutePath());
    conf.set("dfs.namenode.rpc-bind-host", "127.0.0.1");
    // The name DataNodes register with (their IP stays 127.0.0.1): clients honouring
    // dfs.client.use.datanode.hostname connect to it.
    conf.set("dfs.datanode.hostname", opts.datanodeHostname);
    // Keep a corrupt replica in place after it is reported, so tests can inspect it.
    conf.setInt("dfs.namenode.replication.interval", 3600);
    if (secure != null) {
      secure.configure(conf, new File(opts.resourceDir));
    }
    if (opts.domainSocketDir != null) {
      // short-circuit-reads.md: the DataNodes pass block and meta file descriptors over this
      // socket (_PORT becomes each DataNode's xfer port); shared-memory slots come from /dev/shm.
      if (!org.apache.hadoop.util.NativeCodeLoader.isNativeCodeLoaded()
          || org.apache.hadoop.net.unix.DomainSocket.getLoadingFailureReason() != null) {
        throw new IllegalStateException("short-circuit reads need libhadoop.so on java.library.path: "
            + org.apache.hadoop.net.unix.DomainSocket.getLoadingFailureReason());
      }
      conf.set("dfs.domain.socket.path", domainSocketPattern());
      conf.setBoolean("dfs.client.read.shortcircuit", true);
    }
    if (opts.observer) {
      // Observer reads (hdfs-observer-reads.md, recipe B): state ids on every response, fast
      // tailing of in-progress edits, and no atime updates that would send opens to the active.
      conf.setBoolean("dfs.namenode.state.context.enabled", true);
      conf.setBoolean("dfs.ha.tail-edits.in-progress", true);
      conf.set("dfs.ha.tail-edits.period", opts.tailPeriod);
      conf.setLong("dfs.namenode.accesstime.precision", 0);
    }

    MiniDFSCluster.Builder b = new MiniDFSCluster.Builder(conf).numDataNodes(opts.datanodes)
        .checkDataNodeHostConfig(true);  // keep our dfs.datanode.hostname
    if (opts.federation > 0) {
      MiniDFSNNTopology topology = new MiniDFSNNTopology();
      for (int n = 0; n < opts.federation; n++) {
        MiniDFSNNTopology.NSConf ns = new MiniDFSNNTopology.NSConf(nameservice(n));
        for (int k = 0; k < nnPerNameservice(); k++) {
          ns.addNN(new MiniDFSNNTopology.NNConf(opts.ha ? "nn" + k : null));
        }
        topology.addNameservice(ns);
      }
      topology.setFederation(true);
      b.nnTopology(topology);
    } else if (opts.ha) {
      b.nnTopology(MiniDFSNNTopology.simpleHATopology(nnCount()));
    }
    // Symlinks are off by default in Hadoop 2+; tests need them.
    org.apache.hadoop.fs.FileSystem.enableSymlinks();
    cluster = b.build();
    if (opts.ha) {
      for (int n = 0; n < Math.max(1, opts.federation); n++) {
        cluster.transitionToActive(n * nnPerNameservice());
      }
    }
    if (opts.observer) {
      cluster.transitionToObserver(2);
    }
    cluster.waitActive();
    if (secure != null) {
      secure.started(conf);
    }

    File confDir = new File(base, "conf");
    confDir.mkdirs();
    writeClientConf(confDir);
    if (opts.router) {
      router = (Front) Class.forName("hdfsfuse.minidfs.RouterFront").getDeclaredConstructor().newInstance();
      List<String> monitored = new java.util.ArrayList<>();  // "ns0", or "ns0.nn0" in an HA nameservice
      for (String ns : nameservices()) {
        for (int k = 0; k < nnPerNameservice(); k++) {
          monitored.add(opts.ha ? ns + ".nn" + k : ns);
        }
      }
      routerAddress = router.start(conf, nameservices(), monitored, new File(base, "router"));
    }
    out.println(JSON.writeValueAsString(readyLine(confDir)));
  }

  /** The Router of a --router cluster: compiled only in the launcher's 3.4.2 build (RouterFront). */
  public interface Front {
    /**
     * Start a Router over the nameservices, watching the NameNodes `monitored` ("ns0", or
     * "ns0.nn1" in an HA nameservice); return its RPC address host:port.
     */
    String start(Configuration conf, List<String> nameservices, List<String> monitored, File dir)
        throws Exception;

    void addMount(String src, String ns, String dst) throws Exception;

    void stop() throws Exception;
  }

  private static String nameservice(int n) {
    return "ns" + n;
  }

  private List<String> nameservices() {
    List<String> ids = new java.util.ArrayList<>();
    for (int n = 0; n < opts.federation; n++) {
      ids.add(nameservice(n));
    }
    return ids;
  }

  private int nnPerNameservice() {
    return opts.observer ? 3 : opts.ha ? 2 : 1;
  }

  private String domainSocketPattern() {
    return new File(opts.domainSocketDir, "dn._PORT").getPath();
  }

  private int nnCount() {
    return nnPerNameservice() * Math.max(1, opts.federation);
  }

  private String nnRpc(int i) {
    return "127.0.0.1:" + cluster.getNameNodePort(i);
  }

  /** The default file system, as clients name it (a federation: its first nameservice). */
  private String fsUri() {
    if (opts.federation > 0) {
      return "hdfs://" + nameservice(0);
    }
    return opts.ha ? "hdfs://" + NAMESERVICE : "hdfs://" + nnRpc(0);
  }

  /**
   * A URI the launcher's own Java client can open: Java takes hdfs://NS as a logical name only
   * for an HA nameservice, so a federation's single NameNodes are named by address.
   */
  private String javaUri(String uri) throws Exception {
    java.net.URI u = new java.net.URI(uri);
    if (opts.federation > 0 && !opts.ha && u.getPort() == -1) {
      for (int n = 0; n < opts.federation; n++) {
        if (nameservice(n).equals(u.getHost())) {
          return "hdfs://" + nnRpc(n);
        }
      }
    }
    return uri;
  }

  private void writeClientConf(File confDir) throws Exception {
    Configuration core = new Configuration(false);
    core.set("fs.defaultFS", fsUri());
    if (opts.kmsUri != null) {
      core.set("hadoop.security.key.provider.path", opts.kmsUri);
    }
    Configuration hdfs = new Configuration(false);
    hdfs.setLong("dfs.blocksize", opts.blockSize);
    if (secure != null) {
      secure.clientConf(core, hdfs);
    }
    hdfs.setInt("dfs.replication", opts.replication);
    if (opts.domainSocketDir != null) {
      hdfs.set("dfs.domain.socket.path", domainSocketPattern());
      hdfs.setBoolean("dfs.client.read.shortcircuit", true);
    }
    if (opts.federation > 0) {
      federationConf(hdfs);
    } else if (opts.ha) {
      hdfs.set("dfs.nameservices", NAMESERVICE);
      StringBuilder ids = new StringBuilder();
      for (int i = 0; i < nnCount(); i++) {
        ids.append(i == 0 ? "" : ",").append("nn").append(i);
        hdfs.set("dfs.namenode.rpc-address." + NAMESERVICE + ".nn" + i, nnRpc(i));
      }
      hdfs.set("dfs.ha.namenodes." + NAMESERVICE, ids.toString());
      hdfs.set("dfs.client.failover.proxy.provider." + NAMESERVICE, opts.observer
          ? "org.apache.hadoop.hdfs.server.namenode.ha.ObserverReadProxyProvider"
          : "org.apache.hadoop.hdfs.server.namenode.ha.ConfiguredFailoverProxyProvider");
      // Java's default random order sometimes sends writes to the standby first and sleeps.
      hdfs.setBoolean("dfs.client.failover.random.order", false);
    }
    try (OutputStream o = new FileOutputStream(new File(confDir, "core-site.xml"))) {
      core.writeXml(o);
    }
    try (OutputStream o = new FileOutputStream(new File(confDir, "hdfs-site.xml"))) {
      hdfs.writeXml(o);
    }
    // The Java referee uses the same client configuration as our client would.
    conf.set("fs.defaultFS", javaUri(fsUri()));
    if (opts.ha || opts.federation > 0) {
      for (Map.Entry<String, String> e : hdfs) {
        conf.set(e.getKey(), e.getValue());
      }
    }
  }

  /** Client keys for every nameservice of a federated cluster (each an HA pair with --ha). */
  private void federationConf(Configuration hdfs) {
    hdfs.set("dfs.nameservices", String.join(",", nameservices()));
    for (int n = 0; n < opts.federation; n++) {
      String ns = nameservice(n);
      int first = n * nnPerNameservice();
      if (!opts.ha) {
        hdfs.set("dfs.namenode.rpc-address." + ns, nnRpc(first));
        hdfs.set("dfs.namenode.http-address." + ns,
            "127.0.0.1:" + cluster.getNameNode(first).getHttpAddress().getPort());
        continue;
      }
      StringBuilder ids = new StringBuilder();
      for (int k = 0; k < nnPerNameservice(); k++) {
        ids.append(k == 0 ? "" : ",").append("nn").append(k);
        hdfs.set("dfs.namenode.rpc-address." + ns + ".nn" + k, nnRpc(first + k));
        hdfs.set("dfs.namenode.http-address." + ns + ".nn" + k,
            "127.0.0.1:" + cluster.getNameNode(first + k).getHttpAddress().getPort());
      }
      hdfs.set("dfs.ha.namenodes." + ns, ids.toString());
      hdfs.set("dfs.client.failover.proxy.provider." + ns,
          "org.apache.hadoop.hdfs.server.namenode.ha.ConfiguredFailoverProxyProvider");
    }
    hdfs.setBoolean("dfs.client.failover.random.order", false);
  }

  private ObjectNode readyLine(File confDir) {
    ObjectNode r = JSON.createObjectNode();
    r.put("ready", true);
    r.put("hadoop_version", org.apache.hadoop.util.VersionInfo.getVersion());
    r.put("uri", fsUri());
    r.put("ha", opts.ha);
    r.put("observer", opts.observer);
    if (opts.ha && opts.federation == 0) {
      r.put("nameservice", NAMESERVICE);
    }
    if (opts.federation > 0) {
      ArrayNode list = r.putArray("nameservices");
      for (int n = 0; n < opts.federation; n++) {
        ObjectNode ns = list.addObject();
        ns.put("id", nameservice(n));
        ns.put("uri", "hdfs://" + nameservice(n));
        ArrayNode rpcs = ns.putArray("namenodes");
        for (int k = 0; k < nnPerNameservice(); k++) {
          rpcs.add(nnRpc(n * nnPerNameservice() + k));
        }
      }
    }
    if (router != null) {
      r.put("router_uri", "hdfs://" + routerAddress);
    }
    ArrayNode nns = r.putArray("namenodes");
    int nnCount = nnCount();
    for (int i = 0; i < nnCount; i++) {
      ObjectNode nn = nns.addObject();
      nn.put("rpc", nnRpc(i));
      NameNode node = cluster.getNameNode(i);
      nn.put("state", node.getState());
      if (node.getHttpAddress() != null) {
        nn.put("http", "127.0.0.1:" + node.getHttpAddress().getPort());
      }
      if (node.getHttpsAddress() != null) {
        nn.put("https", "127.0.0.1:" + node.getHttpsAddress().getPort());
      }
    }
    r.set("datanodes", datanodes());
    if (opts.domainSocketDir != null) {
      ArrayNode sockets = r.putArray("domain_sockets");
      for (DataNode dn : cluster.getDataNodes()) {
        sockets.add(domainSocketPattern().replace("_PORT", Integer.toString(dn.getXferPort())));
      }
    }
    r.put("conf_dir", confDir.getPath());
    r.put("block_size", opts.blockSize);
    r.put("bytes_per_checksum", opts.bytesPerChecksum);
    r.put("checksum_type", opts.checksumType);
    if (secure != null) {
      secure.readyLine(r);
    }
    return r;
  }

  private ArrayNode datanodes() {
    ArrayNode dns = JSON.createArrayNode();
    for (DataNode dn : cluster.getDataNodes()) {
      ObjectNode d = dns.addObject();
      d.put("xfer", "127.0.0.1:" + dn.getXferPort());
      d.put("ipc", "127.0.0.1:" + dn.getIpcPort());
      if (dn.getInfoPort() > 0) {
        d.put("http", "127.0.0.1:" + dn.getInfoPort());
      }
      if (dn.getInfoSecurePort() > 0) {
        d.put("https", "127.0.0.1:" + dn.getInfoSecurePort());
      }
    }
    return dns;
  }

  private void serve() throws Exception {
    BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
    String line;
    while ((line = in.readLine()) != null) {
      if (line.isBlank()) {
        continue;
      }
      String reply;
      boolean stop = false;
      try {
        JsonNode cmd = JSON.readTree(line);
        String name = text(cmd, "cmd");
        stop = name.equals("shutdown");
        reply = JSON.writeValueAsString(dispatch(name, cmd));
      } catch (Exception e) {
        System.err.println("command failed: " + line);
        e.printStackTrace();
        reply = error(e.toString());
      }
      out.println(reply);
      if (stop) {
        return;
      }
    }
  }

  private static String error(String msg) {
    ObjectNode r = JSON.createObjectNode();
    r.put("error", msg);
    try {
      return JSON.writeValueAsString(r);
    } catch (Exception e) {
      return "{\"error\": \"unprintable error\"}";
    }
  }

  private static String text(JsonNode cmd, String field) {
    JsonNode v = cmd.get(field);
    if (v == null || v.isNull()) {
      throw new IllegalArgumentException("missing field: " + field);
    }
    return v.asText();
  }

  private DistributedFileSystem fs() throws Exception {
    String uri = javaUri(commandFs != null ? commandFs : fsUri());
    return (DistributedFileSystem) org.apache.hadoop.fs.FileSystem.get(new java.net.URI(uri), conf);
  }

  /** A path without its scheme and authority (DFSClient takes bare paths). */
  private static String bare(String path) {
    return new Path(path).toUri().getPath();
  }

  private ObjectNode dispatch(String name, JsonNode cmd) throws Exception {
    commandFs = null;
    if (!name.equals("add_mount")) {
      for (String field : new String[] {"path", "src", "dst", "target"}) {
        JsonNode v = cmd.get(field);
        if (v != null && v.asText().startsWith("hdfs://")) {
          java.net.URI u = new java.net.URI(v.asText());
          String fs = javaUri(u.getScheme() + "://" + u.getAuthority());
          ((ObjectNode) cmd).put(field, fs + u.getRawPath());
          commandFs = commandFs != null ? commandFs : fs;
        }
      }
    }
    ObjectNode r = JSON.createObjectNode();
    r.put("ok", true);
    switch (name) {
      case "put": put(cmd, r); break;
      case "mkdir": {
        FsPermission perm = cmd.has("mode")
            ? new FsPermission(Short.parseShort(text(cmd, "mode"), 8)) : FsPermission.getDirDefault();
        fs().mkdirs(new Path(text(cmd, "path")), perm);
        if (cmd.has("mode")) {
          fs().setPermission(new Path(text(cmd, "path")), perm);
        }
        break;
      }
      case "chmod":
        fs().setPermission(new Path(text(cmd, "path")),
            new FsPermission(Short.parseShort(text(cmd, "mode"), 8)));
        break;
      case "chown":
        fs().setOwner(new Path(text(cmd, "path")),
            cmd.has("owner") ? text(cmd, "owner") : null, cmd.has("group") ? text(cmd, "group") : null);
        break;
      case "touch_many": {
        // Many small files in one command: name-00000 .. name-(count-1), `size` bytes each.
        Path dir = new Path(text(cmd, "path"));
        int count = cmd.get("count").asInt();
        int size = cmd.has("size") ? cmd.get("size").asInt() : 0;
        String prefix = cmd.has("prefix") ? text(cmd, "prefix") : "f-";
        long mtime = cmd.has("mtime") ? cmd.get("mtime").asLong() : -1;  // ms since the epoch; -1: now
        DistributedFileSystem fs = fs();
        fs.mkdirs(dir);
        byte[] payload = new byte[size];
        for (int i = 0; i < count; i++) {
          Path file = new Path(dir, String.format("%s%05d", prefix, i));
          try (FSDataOutputStream o = fs.create(file, true)) {
            java.util.Arrays.fill(payload, (byte) i);
            o.write(payload);
          }
          if (mtime >= 0) {
            fs.setTimes(file, mtime, -1);
          }
        }
        break;
      }
      case "set_times":
        // A file's modification time (ms since the epoch), as a data set written long ago has.
        fs().setTimes(new Path(text(cmd, "path")), cmd.get("mtime").asLong(), -1);
        break;
      case "symlink":
        fs().createSymlink(new Path(text(cmd, "target")), new Path(text(cmd, "path")), false);
        break;
      case "delete":
        r.put("deleted", fs().delete(new Path(text(cmd, "path")), true));
        break;
      case "ls": {
        ArrayNode entries = r.putArray("entries");
        for (FileStatus st : fs().listStatus(new Path(text(cmd, "path")))) {
          entries.add(status(st));
        }
        break;
      }
      case "stat": stat(text(cmd, "path"), r); break;
      case "sha256": sha256(text(cmd, "path"), r); break;
      case "blocks": blocks(text(cmd, "path"), r); break;
      case "stop_datanode": {
        // By address, or by the DataNode holding an internal block of a striped group.
        String xfer = cmd.has("xfer") ? text(cmd, "xfer") : internalBlockHolder(cmd);
        stopped.put(xfer, new StoppedDataNode(dataNodeIndex(xfer)));
        r.put("xfer", xfer);
        break;
      }
      case "restart_datanode": {
        String xfer = text(cmd, "xfer");
        StoppedDataNode s = stopped.remove(xfer);
        if (s == null) {
          throw new IllegalArgumentException("no stopped DataNode at " + xfer);
        }
        s.restart();
        // Wait for this DataNode only: waitActive() would wait for the NameNode to count the
        // running DataNodes, which never happens while another one is stopped (the NameNode
        // still lists a stopped DataNode until its heartbeats expire).
        cluster.waitDatanodeFullyStarted(cluster.getDataNodes().get(dataNodeIndex(xfer)), 60_000);
        r.set("datanodes", datanodes());
        break;
      }
      case "process_invalidations": {
        // Deleted files' replicas go to the DataNodes now rather than at the next redundancy
        // monitor run (which this launcher slows to an hour so corrupt replicas stay put).
        r.put("blocks", org.apache.hadoop.hdfs.server.blockmanagement.BlockManagerTestUtil
            .computeInvalidationWork(cluster.getNamesystem(activeNameNode()).getBlockManager()));
        cluster.triggerHeartbeats();
        break;
      }
      case "set_short_circuit": setShortCircuit(text(cmd, "xfer"), cmd.get("enabled").asBoolean(), r); break;
      case "corrupt_replica": corruptReplica(cmd, r); break;
      case "corrupt_replicas": corruptReplicas(text(cmd, "path"), r); break;
      case "metrics": metrics(r); break;
      case "nn_metrics": nnMetrics(r); break;
      case "restart_namenode": {
        int nn = cmd.has("index") ? cmd.get("index").asInt() : activeNameNode();
        restartNameNode(nn);
        if (opts.ha) {
          cluster.transitionToActive(nn);
        }
        cluster.waitActive();
        break;
      }
      case "failover": {
        if (!opts.ha) {
          throw new IllegalStateException("failover needs an HA cluster (--ha)");
        }
        int active = activeNameNode();
        int next = 1 - active;
        cluster.transitionToStandby(active);
        cluster.transitionToActive(next);
        r.put("active", nnRpc(next));
        break;
      }
      case "active_namenode": r.put("active", nnRpc(activeNameNode())); break;
      case "nn_rpc_counts": nnRpcCounts(r); break;
      case "transition": {
        // One NameNode of an HA cluster to another state: observer, standby (or active).
        int i = cmd.get("index").asInt();
        switch (text(cmd, "state")) {
          case "observer": cluster.transitionToObserver(i); break;
          case "standby": cluster.transitionToStandby(i); break;
          case "active": cluster.transitionToActive(i); break;
          default: throw new IllegalArgumentException("state must be observer, standby or active");
        }
        r.put("state", cluster.getNameNode(i).getState());
        break;
      }
      case "append_open": appendOpen(cmd, r); break;
      case "append_close": {
        FSDataOutputStream o = openWriters.remove(text(cmd, "path"));
        if (o == null) {
          throw new IllegalArgumentException("no open writer for " + text(cmd, "path"));
        }
        o.close();
        break;
      }
      case "allow_snapshot": fs().allowSnapshot(new Path(text(cmd, "path"))); break;
      case "create_snapshot":
        r.put("path", fs().createSnapshot(new Path(text(cmd, "path")), text(cmd, "name")).toUri().getPath());
        break;
      case "delete_snapshot": fs().deleteSnapshot(new Path(text(cmd, "path")), text(cmd, "name")); break;
      case "rename":
        // Overwrite allowed: an existing destination file is replaced, as INSERT OVERWRITE does.
        fs().rename(new Path(text(cmd, "src")), new Path(text(cmd, "dst")),
            org.apache.hadoop.fs.Options.Rename.OVERWRITE);
        break;
      case "truncate": {
        Path p = new Path(text(cmd, "path"));
        boolean done = fs().truncate(p, cmd.get("length").asLong());
        if (!done) {
          // The last block is being recovered to the new length: wait until the file is closed.
          long deadline = System.currentTimeMillis() + 60_000;
          while (!fs().isFileClosed(p)) {
            if (System.currentTimeMillis() > deadline) {
              throw new IllegalStateException("truncate recovery of " + p + " did not finish");
            }
            Thread.sleep(50);
          }
        }
        break;
      }
      case "add_principal": {
        requireSecure(name);
        String principal = text(cmd, "name");
        r.put("keytab", secure.addPrincipal(principal).getAbsolutePath());
        r.put("principal", secure.principal(principal));
        break;
      }
      case "delegation_token":
        requireSecure(name);
        secure.delegationToken(text(cmd, "user"), cmd.has("renewer") ? text(cmd, "renewer") : null,
            text(cmd, "file"), cmd.has("format") && text(cmd, "format").equals("protobuf"),
            new java.net.URI(javaUri(fsUri())), conf, r);
        break;
      case "set_acl":
        fs().modifyAclEntries(new Path(text(cmd, "path")),
            org.apache.hadoop.fs.permission.AclEntry.parseAclSpec(text(cmd, "spec"), true));
        break;
      case "remove_acl": fs().removeAcl(new Path(text(cmd, "path"))); break;
      case "file_checksum": {
        // What `hdfs dfs -checksum` prints with dfs.checksum.combine.mode=COMPOSITE_CRC.
        Configuration c = new Configuration(conf);
        c.set("dfs.checksum.combine.mode", "COMPOSITE_CRC");
        try (org.apache.hadoop.fs.FileSystem fs = org.apache.hadoop.fs.FileSystem.newInstance(
            new java.net.URI(commandFs != null ? commandFs : javaUri(fsUri())), c)) {
          org.apache.hadoop.fs.FileChecksum sum = fs.getFileChecksum(new Path(text(cmd, "path")));
          r.put("algorithm", sum == null ? null : sum.getAlgorithmName());
          StringBuilder hex = new StringBuilder();
          if (sum != null) {
            for (byte x : sum.getBytes()) {
              hex.append(String.format("%02x", x));
            }
          }
          r.put("bytes", hex.toString());
        }
        break;
      }
      case "set_quota":
        fs().setQuota(new Path(text(cmd, "path")), cmd.get("ns").asLong(), cmd.get("space").asLong());
        break;
      case "set_replication": {
        // The redundancy monitor runs hourly here: schedule the new replicas now, and send them.
        r.put("changed", fs().setReplication(new Path(text(cmd, "path")), (short) cmd.get("replication").asInt()));
        org.apache.hadoop.hdfs.server.blockmanagement.BlockManagerTestUtil.computeAllPendingWork(
            cluster.getNamesystem(activeNameNode()).getBlockManager());
        cluster.triggerHeartbeats();
        break;
      }
      case "set_storage_policy":
        fs().setStoragePolicy(new Path(text(cmd, "path")), text(cmd, "policy"));
        break;
      case "setxattr":
        fs().setXAttr(new Path(text(cmd, "path")), text(cmd, "name"),
            text(cmd, "value").getBytes(StandardCharsets.UTF_8));
        break;
      case "set_ec_policy": {
        Path dir = new Path(text(cmd, "path"));
        String policy = text(cmd, "policy");
        DistributedFileSystem fs = fs();
        fs.enableErasureCodingPolicy(policy);
        fs.mkdirs(dir);
        fs.setErasureCodingPolicy(dir, policy);
        break;
      }
      case "add_ec_policy": addEcPolicy(cmd, r); break;
      case "create_key": {
        // Through the NameNode's own key provider: on the KMS when there is one.
        org.apache.hadoop.crypto.key.KeyProvider provider = cluster.getNamesystem(activeNameNode()).getProvider();
        org.apache.hadoop.crypto.key.KeyProvider.Options options =
            org.apache.hadoop.crypto.key.KeyProvider.options(conf);
        if (cmd.has("length")) {
          options.setBitLength(cmd.get("length").asInt());
        }
        r.put("version", provider.createKey(text(cmd, "name"), options).getVersionName());
        provider.flush();
        break;
      }
      case "roll_key": {
        // Through the NameNode's provider, which drains its queue of EDEKs made with the old
        // version: the next file created in the key's zones gets the new one.
        org.apache.hadoop.crypto.key.KeyProvider provider = cluster.getNamesystem(activeNameNode()).getProvider();
        r.put("version", provider.rollNewVersion(text(cmd, "name")).getVersionName());
        provider.flush();
        break;
      }
      case "create_encryption_zone": {
        String key = text(cmd, "key");
        Path dir = new Path(text(cmd, "path"));
        if (cluster.getNamesystem(activeNameNode()).getProvider().getMetadata(key) == null) {
          org.apache.hadoop.hdfs.DFSTestUtil.createKey(key, cluster, activeNameNode(), conf);
        }
        fs().mkdirs(dir);
        new org.apache.hadoop.hdfs.client.HdfsAdmin(new java.net.URI(javaUri(fsUri())), conf).createEncryptionZone(
            dir, key, java.util.EnumSet.of(org.apache.hadoop.hdfs.client.CreateEncryptionZoneFlag.NO_TRASH));
        break;
      }
      case "add_mount": {
        if (router == null) {
          throw new IllegalStateException("add_mount needs a Router (--router)");
        }
        router.addMount(text(cmd, "src"), text(cmd, "ns"), text(cmd, "dst"));
        break;
      }
      case "shutdown": break;
      default: throw new IllegalArgumentException("unknown command: " + name);
    }
    return r;
  }

  private void requireSecure(String cmd) {
    if (secure == null) {
      throw new IllegalStateException(cmd + " needs a secure cluster (--kerberos)");
    }
  }

  private int activeNameNode() {
    int n = nnCount();
    for (int i = 0; i < n; i++) {
      if (cluster.getNameNode(i) != null && cluster.getNameNode(i).isActiveState()) {
        return i;
      }
    }
    throw new IllegalStateException("no active NameNode");
  }

  private void put(JsonNode cmd, ObjectNode r) throws Exception {
    Path p = new Path(text(cmd, "path"));
    DistributedFileSystem fs = fs();
    long blockSize = cmd.has("block_size") ? cmd.get("block_size").asLong() : opts.blockSize;
    short repl = (short) (cmd.has("replication") ? cmd.get("replication").asInt() : opts.replication);
    long n = 0;
    try (InputStream in = new FileInputStream(text(cmd, "local"));
        FSDataOutputStream o = fs.create(p, true, 65536, repl, blockSize)) {
      n = in.transferTo(o);
    }
    r.put("length", n);
  }

  private void appendOpen(JsonNode cmd, ObjectNode r) throws Exception {
    String path = text(cmd, "path");
    Path p = new Path(path);
    DistributedFileSystem fs = fs();
    FSDataOutputStream o = openWriters.get(path);
    if (o == null) {
      o = fs.exists(p) ? fs.append(p) : fs.create(p, true);
      openWriters.put(path, o);
    }
    try (InputStream in = new FileInputStream(text(cmd, "local"))) {
      in.transferTo(o);
    }
    if (!cmd.has("hflush") || cmd.get("hflush").asBoolean()) {
      o.hflush();
    }
    r.put("position", o.getPos());
  }

  private ObjectNode status(FileStatus st) {
    ObjectNode e = JSON.createObjectNode();
    e.put("name", st.getPath().getName());
    e.put("type", st.isDirectory() ? "dir" : st.isSymlink() ? "symlink" : "file");
    e.put("length", st.getLen());
    e.put("owner", st.getOwner());
    e.put("group", st.getGroup());
    e.put("mode", Integer.toOctalString(st.getPermission().toShort() & 01777));
    e.put("mtime", st.getModificationTime());
    e.put("atime", st.getAccessTime());
    e.put("replication", st.getReplication());
    e.put("block_size", st.getBlockSize());
    if (st instanceof HdfsFileStatus) {
      e.put("file_id", ((HdfsFileStatus) st).getFileId());
    }
    return e;
  }

  private void stat(String path, ObjectNode r) throws Exception {
    HdfsFileStatus st = fs().getClient().getFileLinkInfo(bare(path));
    if (st == null) {
      r.put("exists", false);
      return;
    }
    r.put("exists", true);
    r.put("type", st.isDirectory() ? "dir" : st.isSymlink() ? "symlink" : "file");
    r.put("length", st.getLen());
    r.put("owner", st.getOwner());
    r.put("group", st.getGroup());
    r.put("mode", Integer.toOctalString(st.getPermission().toShort() & 01777));
    r.put("mtime", st.getModificationTime());
    r.put("atime", st.getAccessTime());
    r.put("replication", st.getReplication());
    r.put("block_size", st.getBlockSize());
    r.put("file_id", st.getFileId());
    r.put("children", st.getChildrenNum());
    if (st.isSymlink()) {
      r.put("symlink", st.getSymlink().toString());
    }
  }

  private void sha256(String path, ObjectNode r) throws Exception {
    MessageDigest md = MessageDigest.getInstance("SHA-256");
    byte[] buf = new byte[1 << 16];
    long n = 0;
    try (FSDataInputStream in = fs().open(new Path(path))) {
      int k;
      while ((k = in.read(buf)) > 0) {
        md.update(buf, 0, k);
        n += k;
      }
    }
    StringBuilder hex = new StringBuilder();
    for (byte x : md.digest()) {
      hex.append(String.format("%02x", x));
    }
    r.put("sha256", hex.toString());
    r.put("length", n);
  }

  private LocatedBlocks located(String path) throws Exception {
    return fs().getClient().getLocatedBlocks(bare(path), 0, Long.MAX_VALUE);
  }

  private void blocks(String path, ObjectNode r) throws Exception {
    ArrayNode arr = r.putArray("blocks");
    LocatedBlocks all = located(path);
    ErasureCodingPolicy ec = all.getErasureCodingPolicy();
    if (ec != null) {
      r.put("ec_policy", ec.getName());
    }
    for (LocatedBlock lb : all.getLocatedBlocks()) {
      ObjectNode b = arr.addObject();
      b.put("offset", lb.getStartOffset());
      b.put("length", lb.getBlockSize());
      b.put("block_id", lb.getBlock().getBlockId());
      b.put("generation_stamp", lb.getBlock().getGenerationStamp());
      ArrayNode locs = b.putArray("xfer");
      for (DatanodeInfo dn : lb.getLocations()) {
        locs.add(dn.getXferAddr());
      }
      if (lb instanceof LocatedStripedBlock) {
        // Each stored internal block: its index, id, length and DataNode (the NameNode's order).
        LocatedStripedBlock sb = (LocatedStripedBlock) lb;
        b.put("striped", true);
        ArrayNode internal = b.putArray("internal");
        byte[] indices = sb.getBlockIndices();
        DatanodeInfo[] dns = sb.getLocations();
        for (int i = 0; i < indices.length; i++) {
          ObjectNode u = internal.addObject();
          u.put("index", indices[i]);
          u.put("block_id", lb.getBlock().getBlockId() + indices[i]);
          u.put("length", StripedBlockUtil.getInternalBlockLength(
              lb.getBlockSize(), ec.getCellSize(), ec.getNumDataUnits(), indices[i]));
          u.put("xfer", dns[i].getXferAddr());
        }
      }
    }
  }

  /** The striped group `block_index` of `path`, checked. */
  private LocatedStripedBlock stripedGroup(JsonNode cmd) throws Exception {
    List<LocatedBlock> blocks = located(text(cmd, "path")).getLocatedBlocks();
    int index = cmd.get("block_index").asInt();
    if (index < 0 || index >= blocks.size()) {
      throw new IllegalArgumentException("block_index out of range: " + index);
    }
    if (!(blocks.get(index) instanceof LocatedStripedBlock)) {
      throw new IllegalArgumentException("block " + index + " of " + text(cmd, "path") + " is not striped");
    }
    return (LocatedStripedBlock) blocks.get(index);
  }

  /** The xfer address of the DataNode holding internal block `internal_index` of a striped group. */
  private String internalBlockHolder(JsonNode cmd) throws Exception {
    LocatedStripedBlock sb = stripedGroup(cmd);
    int want = cmd.get("internal_index").asInt();
    byte[] indices = sb.getBlockIndices();
    for (int i = 0; i < indices.length; i++) {
      if (indices[i] == want) {
        return sb.getLocations()[i].getXferAddr();
      }
    }
    throw new IllegalArgumentException("internal block " + want + " has no location");
  }

  private void addEcPolicy(JsonNode cmd, ObjectNode r) throws Exception {
    ECSchema schema = new ECSchema(text(cmd, "codec"), cmd.get("data").asInt(), cmd.get("parity").asInt());
    ErasureCodingPolicy wanted = new ErasureCodingPolicy(schema, cmd.get("cell_size").asInt());
    DistributedFileSystem fs = fs();
    AddErasureCodingPolicyResponse[] resp = fs.addErasureCodingPolicies(new ErasureCodingPolicy[] {wanted});
    if (!resp[0].isSucceed()) {
      // The same schema and cell size already exists under its composed name: use that one.
      if (fs.getAllErasureCodingPolicies().stream().noneMatch(p -> p.getPolicy().getName().equals(wanted.getName()))) {
        throw new IllegalStateException("adding " + wanted.getName() + " failed: " + resp[0].getErrorMsg());
      }
    }
    String name = resp[0].isSucceed() ? resp[0].getPolicy().getName() : wanted.getName();
    fs.enableErasureCodingPolicy(name);
    r.put("name", name);
  }

  /**
   * Restart one DataNode with dfs.client.read.shortcircuit on or off. Off, it keeps its domain
   * socket but refuses file descriptors (ERROR_UNSUPPORTED "File descriptor passing was not
   * configured"), which is what a client meets on a DataNode with short-circuit turned off.
   */
  private void setShortCircuit(String xfer, boolean enabled, ObjectNode r) throws Exception {
    if (opts.domainSocketDir == null) {
      throw new IllegalStateException("set_short_circuit needs a --short-circuit cluster");
    }
    StoppedDataNode s = new StoppedDataNode(dataNodeIndex(xfer));
    java.lang.reflect.Field confField = MiniDFSCluster.DataNodeProperties.class.getDeclaredField("conf");
    confField.setAccessible(true);
    Configuration dnConf = (Configuration) confField.get(s.props);
    dnConf.setBoolean("dfs.client.read.shortcircuit", enabled);
    // Without either key the DataNode would not open its domain socket at all.
    dnConf.setBoolean("dfs.client.domain.socket.data.traffic", !enabled);
    s.restart();
    cluster.waitDatanodeFullyStarted(cluster.getDataNodes().get(dataNodeIndex(xfer)), 60_000);
    r.put("xfer", xfer);
  }

  /**
   * Sockets bound (never listening) on the ports a stopped server restarts on. While it is down
   * nothing else may take those ports: the kernel could otherwise give one to an outgoing
   * connection (the mount's, a client's, a DataNode's) as its local port, and the restart would
   * fail with "Address already in use". The kernel never picks a bound port for a connect. These
   * sockets and Hadoop's listeners all set SO_REUSEADDR and these never listen, so the server
   * binds over them; they are closed once it is up.
   */
  private static final class HeldPorts implements AutoCloseable {
    private final List<java.net.Socket> held = new java.util.ArrayList<>();

    HeldPorts(int... ports) throws java.io.IOException {
      for (int port : ports) {
        if (port <= 0) {
          continue;
        }
        java.net.Socket s = new java.net.Socket();
        s.setReuseAddress(true);
        try {
          s.bind(new java.net.InetSocketAddress("127.0.0.1", port));
          held.add(s);
        } catch (java.io.IOException e) {
          s.close();  // taken in the moment since the stop: the restart may still find it free
          System.err.println("could not hold port " + port + " of a stopped server: " + e);
        }
      }
    }

    @Override
    public void close() throws java.io.IOException {
      for (java.net.Socket s : held) {
        s.close();
      }
    }
  }

  /** A stopped DataNode, holding its transfer and IPC ports until it restarts on them. */
  private final class StoppedDataNode {
    final MiniDFSCluster.DataNodeProperties props;
    private final HeldPorts ports;

    StoppedDataNode(int index) throws java.io.IOException {
      DataNode dn = cluster.getDataNodes().get(index);
      int xferPort = dn.getXferPort();
      int ipcPort = dn.getIpcPort();
      props = cluster.stopDataNode(index);
      ports = new HeldPorts(xferPort, ipcPort);
    }

    void restart() throws java.io.IOException {
      try (HeldPorts held = ports) {
        cluster.restartDataNode(props, true);
      }
    }
  }

  /** Restart one NameNode on its ports (client and service RPC, HTTP), holding them while it is down. */
  private void restartNameNode(int nn) throws java.io.IOException {
    NameNode node = cluster.getNameNode(nn);
    int[] ports = java.util.stream.Stream.of(node.getNameNodeAddress(), node.getServiceRpcAddress(),
            node.getHttpAddress(), node.getHttpsAddress())
        .filter(java.util.Objects::nonNull).mapToInt(java.net.InetSocketAddress::getPort).distinct().toArray();
    cluster.shutdownNameNode(nn);
    try (HeldPorts held = new HeldPorts(ports)) {
      cluster.restartNameNode(nn, true);
    }
  }

  private int dataNodeIndex(String xfer) {
    List<DataNode> dns = cluster.getDataNodes();
    for (int i = 0; i < dns.size(); i++) {
      DataNode dn = dns.get(i);
      if (("127.0.0.1:" + dn.getXferPort()).equals(xfer)
          || (dn.getDatanodeId() != null && dn.getDatanodeId().getXferAddr().equals(xfer))) {
        return i;
      }
    }
    throw new IllegalArgumentException("no running DataNode at " + xfer);
  }

  private void corruptReplica(JsonNode cmd, ObjectNode r) throws Exception {
    String path = text(cmd, "path");
    int index = cmd.get("block_index").asInt();
    long offset = cmd.get("offset").asLong();
    int length = cmd.has("length") ? cmd.get("length").asInt() : 1;
    List<LocatedBlock> blocks = located(path).getLocatedBlocks();
    if (index < 0 || index >= blocks.size()) {
      throw new IllegalArgumentException("block_index out of range: " + index);
    }
    LocatedBlock lb = blocks.get(index);
    ExtendedBlock block = lb.getBlock();
    String xfer;
    if (cmd.has("internal_index")) {
      // One internal block of a striped group, on the DataNode that holds it.
      ErasureCodingPolicy ec = located(path).getErasureCodingPolicy();
      block = StripedBlockUtil.constructInternalBlock(block, ec.getCellSize(), ec.getNumDataUnits(),
          cmd.get("internal_index").asInt());
      xfer = cmd.has("xfer") ? text(cmd, "xfer") : internalBlockHolder(cmd);
    } else {
      xfer = text(cmd, "xfer");
    }
    // Ask the DataNode itself: MiniDFSCluster's index-based lookups go wrong once a DataNode
    // has been restarted (it moves to the end of the list; its directories do not).
    File blockFile;
    try {
      blockFile = new File(cluster.getDataNodes().get(dataNodeIndex(xfer)).getFSDataset()
          .getBlockLocalPathInfo(block).getBlockPath());
    } catch (java.io.IOException e) {
      throw new IllegalArgumentException("that DataNode holds no replica of block " + index + ": " + e);
    }
    if (offset < 0 || offset + length > blockFile.length()) {
      throw new IllegalArgumentException("offset/length outside the block file");
    }
    try (RandomAccessFile f = new RandomAccessFile(blockFile, "rw")) {
      byte[] buf = new byte[length];
      f.seek(offset);
      f.readFully(buf);
      for (int i = 0; i < length; i++) {
        buf[i] = (byte) (buf[i] ^ 0xFF);
      }
      f.seek(offset);
      f.write(buf);
    }
    r.put("block_file", blockFile.getPath());
    r.put("block_id", block.getBlockId());
    r.put("xfer", xfer);
  }

  private void corruptReplicas(String path, ObjectNode r) throws Exception {
    ArrayNode arr = r.putArray("corrupt");
    // A racy read of the NameNode's corrupt-replica map is fine for a test referee.
    for (LocatedBlock lb : located(path).getLocatedBlocks()) {
      arr.add(cluster.getNamesystem(activeNameNode()).getBlockManager()
          .numCorruptReplicas(lb.getBlock().getLocalBlock()));
    }
  }

  private void metrics(ObjectNode r) {
    ArrayNode arr = r.putArray("datanodes");
    for (DataNode dn : cluster.getDataNodes()) {
      MetricsRecordBuilder rb = MetricsAsserts.getMetrics(dn.getMetrics().name());
      ObjectNode d = arr.addObject();
      d.put("xfer", "127.0.0.1:" + dn.getXferPort());
      d.put("BytesRead", MetricsAsserts.getLongCounter("BytesRead", rb));
      d.put("ReadBlockOpNumOps", MetricsAsserts.getLongCounter("ReadBlockOpNumOps", rb));
      d.put("BlocksRead", MetricsAsserts.getLongCounter("BlocksRead", rb));
    }
  }

  /** Per NameNode: its state and the client RPCs it served, by method (its RPC detailed metrics). */
  private void nnRpcCounts(ObjectNode r) {
    ArrayNode arr = r.putArray("namenodes");
    for (int i = 0; i < nnCount(); i++) {
      ObjectNode nn = arr.addObject();
      int port = cluster.getNameNodePort(i);
      nn.put("rpc", nnRpc(i));
      nn.put("state", cluster.getNameNode(i).getState());
      MetricsRecordBuilder rb = MetricsAsserts.getMetrics("RpcDetailedActivityForPort" + port);
      for (String m : new String[] {"GetListing", "GetFileInfo", "GetFileLinkInfo", "GetLocatedFileInfo",
          "GetBlockLocations", "GetServerDefaults", "Msync"}) {
        long n;
        try {
          n = MetricsAsserts.getLongCounter(m + "NumOps", rb);
        } catch (Throwable e) {  // never called on this NameNode: the metric does not exist yet
          n = 0;
        }
        nn.put(m, n);
      }
    }
  }

  /** The NameNode's own counts of the client operations hdfsfuse issues. */
  private void nnMetrics(ObjectNode r) {
    MetricsRecordBuilder rb = MetricsAsserts.getMetrics("NameNodeActivity");
    for (String name : new String[] {"FileInfoOps", "GetListingOps", "GetBlockLocations", "GetLinkTargetOps"}) {
      r.put(name, MetricsAsserts.getLongCounter(name, rb));
    }
  }

  private void shutdown() {
    for (FSDataOutputStream o : openWriters.values()) {
      try {
        o.close();
      } catch (Exception e) {
        System.err.println("closing a writer at shutdown: " + e);
      }
    }
    if (router != null) {
      try {
        router.stop();
      } catch (Exception e) {
        System.err.println("stopping the Router: " + e);
      }
    }
    if (cluster != null) {
      cluster.shutdown(true);
    }
    if (secure != null) {
      secure.stop();
    }
  }
}

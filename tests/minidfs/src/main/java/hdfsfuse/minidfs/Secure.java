package hdfsfuse.minidfs;

import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.DataOutputStream;
import java.io.File;
import java.io.FileOutputStream;
import java.net.URI;
import java.security.PrivilegedExceptionAction;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Properties;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.minikdc.MiniKdc;
import org.apache.hadoop.security.Credentials;
import org.apache.hadoop.security.UserGroupInformation;
import org.apache.hadoop.security.authorize.ProxyUsers;
import org.apache.hadoop.security.ssl.KeyStoreTestUtil;
import org.apache.hadoop.security.token.Token;

/**
 * A secure cluster for the tests: a MiniKdc, its principals and keytabs, and the Kerberos,
 * block-token, SASL and HTTPS settings of Hadoop's own secure tests
 * (SaslDataTransferTestCase.createSecureConfig).
 *
 * <p>The NameNode and DataNodes share one service principal, hdfs/localhost (one JVM, one UGI);
 * the launcher logs in as it, so its own commands run as the HDFS superuser.
 */
final class Secure {
  static final String SERVICE = "hdfs/localhost";
  static final String CLIENT = "alice";

  private final Main.Options opts;
  private final File dir;
  private MiniKdc kdc;
  private File serviceKeytab;
  /** Principal name without realm -> its keytab. */
  private final Map<String, File> keytabs = new LinkedHashMap<>();

  Secure(Main.Options opts, File base) {
    this.opts = opts;
    this.dir = new File(base, "kerberos");
  }

  String realm() {
    return kdc.getRealm();
  }

  String principal(String name) {
    return name + "@" + realm();
  }

  /** Start the KDC and create the service and client principals. Call before anything touches UGI. */
  void startKdc() throws Exception {
    dir.mkdirs();
    Properties kconf = MiniKdc.createConf();
    if (opts.ticketLifetime > 0) {
      // Kerby reads this as seconds.
      kconf.setProperty(MiniKdc.MAX_TICKET_LIFETIME, String.valueOf(opts.ticketLifetime));
    }
    kdc = new MiniKdc(kconf, new File(dir, "kdc"));
    kdc.start();
    serviceKeytab = new File(dir, "hdfs.keytab");
    kdc.createPrincipal(serviceKeytab, SERVICE, "HTTP/localhost");
    addPrincipal(CLIENT);
    if (opts.proxyUser != null) {
      addPrincipal(opts.proxyUser);
    }
  }

  /** A principal with its own keytab; the same keytab again if it already exists. */
  synchronized File addPrincipal(String name) throws Exception {
    if (!name.matches("[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+)?")) {
      throw new IllegalArgumentException("bad principal name: " + name);
    }
    File keytab = keytabs.get(name);
    if (keytab == null) {
      keytab = new File(dir, name.replace('/', '_') + ".keytab");
      kdc.createPrincipal(keytab, name);
      keytabs.put(name, keytab);
    }
    return keytab;
  }

  /** Server settings: Kerberos RPC, block tokens, SASL/encryption on data transfer, HTTPS. */
  void configure(Configuration conf, File resourceDir) throws Exception {
    String service = principal(SERVICE);
    conf.set("hadoop.security.authentication", "kerberos");
    conf.setBoolean("hadoop.security.authorization", true);
    conf.set("hadoop.rpc.protection", opts.rpcProtection);
    conf.set("dfs.namenode.kerberos.principal", service);
    conf.set("dfs.namenode.keytab.file", serviceKeytab.getPath());
    conf.set("dfs.datanode.kerberos.principal", service);
    conf.set("dfs.datanode.keytab.file", serviceKeytab.getPath());
    conf.set("dfs.web.authentication.kerberos.principal", principal("HTTP/localhost"));
    conf.set("dfs.web.authentication.kerberos.keytab", serviceKeytab.getPath());
    conf.setBoolean("dfs.block.access.token.enable", true);
    conf.setBoolean("dfs.permissions.enabled", true);
    conf.setBoolean("dfs.namenode.acls.enabled", true);
    conf.setInt("ipc.client.connect.max.retries.on.sasl", 10);
    // The client principal is no user of this machine, so looking up its groups fails, and
    // Hadoop caches a failure for only 30 s (hadoop.security.groups.negative-cache.secs): every
    // 30 s the NameNode's next call from it forked `id` again (measured: 10-28 ms added to that
    // call). A real user's groups stay cached for 5 minutes. A static mapping to no groups, what
    // the failed lookup gave, costs no fork. dr.who=; is Hadoop's default, kept.
    conf.set("hadoop.user.group.static.mapping.overrides", "dr.who=;" + CLIENT + "=");
    if (opts.dataTransferProtection != null) {
      conf.set("dfs.data.transfer.protection", opts.dataTransferProtection);
    } else {
      // DataNodes on unprivileged ports with no SASL on data transfer (Hadoop's testing switch).
      conf.setBoolean("ignore.secure.ports.for.testing", true);
    }
    if (opts.encryptDataTransfer) {
      conf.setBoolean("dfs.encrypt.data.transfer", true);
      conf.set("dfs.encrypt.data.transfer.cipher.suites", "AES/CTR/NoPadding");
    }
    if (opts.proxyUser != null) {
      String shortName = opts.proxyUser.split("[/@]")[0];
      conf.set("hadoop.proxyuser." + shortName + ".hosts", "127.0.0.1");
      conf.set("hadoop.proxyuser." + shortName + ".users", "*");
      conf.set("hadoop.proxyuser." + shortName + ".groups", "*");
    }
    // HTTPS for the web endpoints, as Hadoop's secure tests set it up. The ssl-*.xml files go
    // into a directory on the launcher's classpath.
    conf.set("dfs.http.policy", "HTTPS_ONLY");
    conf.set("dfs.namenode.https-address", "localhost:0");
    conf.set("dfs.datanode.https.address", "localhost:0");
    File keystores = new File(dir, "keystores");
    keystores.mkdirs();
    resourceDir.mkdirs();
    KeyStoreTestUtil.setupSSLConfig(keystores.getPath(), resourceDir.getPath(), conf, false);
    conf.set("dfs.client.https.keystore.resource", KeyStoreTestUtil.getClientSSLConfigFileName());
    conf.set("dfs.https.server.keystore.resource", KeyStoreTestUtil.getServerSSLConfigFileName());

    UserGroupInformation.setConfiguration(conf);
    UserGroupInformation.loginUserFromKeytab(service, serviceKeytab.getPath());
  }

  /** After start-up: the impersonation provider is a JVM static that must see the cluster conf. */
  void started(Configuration conf) {
    ProxyUsers.refreshSuperUserGroupsConfiguration(conf);
  }

  /** What a client needs in its core-site.xml / hdfs-site.xml. */
  void clientConf(Configuration core, Configuration hdfs) {
    core.set("hadoop.security.authentication", "kerberos");
    core.set("hadoop.rpc.protection", opts.rpcProtection);
    hdfs.set("dfs.namenode.kerberos.principal", principal(SERVICE));
    hdfs.set("dfs.datanode.kerberos.principal", principal(SERVICE));
    hdfs.setBoolean("dfs.block.access.token.enable", true);
    hdfs.set("dfs.http.policy", "HTTPS_ONLY");
    if (opts.dataTransferProtection != null) {
      hdfs.set("dfs.data.transfer.protection", opts.dataTransferProtection);
    }
    if (opts.encryptDataTransfer) {
      hdfs.setBoolean("dfs.encrypt.data.transfer", true);
      hdfs.set("dfs.encrypt.data.transfer.cipher.suites", "AES/CTR/NoPadding");
    }
  }

  void readyLine(ObjectNode r) {
    ObjectNode k = r.putObject("kerberos");
    k.put("realm", realm());
    k.put("krb5_conf", kdc.getKrb5conf().getAbsolutePath());
    k.put("client_principal", principal(CLIENT));
    k.put("client_keytab", keytabs.get(CLIENT).getAbsolutePath());
    k.put("service_principal", principal(SERVICE));
    k.put("service_keytab", serviceKeytab.getAbsolutePath());  // also holds HTTP/localhost (a KMS's SPNEGO)
    k.put("kdc_port", kdc.getPort());
    if (opts.proxyUser != null) {
      ObjectNode p = k.putObject("proxy_user");
      p.put("principal", principal(opts.proxyUser));
      p.put("keytab", keytabs.get(opts.proxyUser).getAbsolutePath());
    }
  }

  /** Writes a Hadoop token storage file with an HDFS delegation token issued to `user`. */
  void delegationToken(String user, String renewer, String file, boolean protobuf, URI fsUri,
      Configuration conf, ObjectNode r) throws Exception {
    File keytab = keytabs.get(user);
    if (keytab == null) {
      throw new IllegalArgumentException("no principal " + user + " (add_principal first)");
    }
    UserGroupInformation ugi =
        UserGroupInformation.loginUserFromKeytabAndReturnUGI(principal(user), keytab.getPath());
    Credentials creds = new Credentials();
    // addDelegationTokens also asks the NameNode's KMS, when it names one, for a kms-dt token
    // (stored under the KMS URI), as a Java job's submission does.
    Token<?>[] tokens = ugi.doAs((PrivilegedExceptionAction<Token<?>[]>) () -> {
      try (FileSystem fs = FileSystem.newInstance(fsUri, conf)) {
        return fs.addDelegationTokens(renewer == null ? user : renewer, creds);
      }
    });
    Token<?> token = tokens[0];
    for (Token<?> t : tokens) {
      if (t.getKind().toString().equals("HDFS_DELEGATION_TOKEN")) {
        token = t;
      }
    }
    try (DataOutputStream out = new DataOutputStream(new FileOutputStream(file))) {
      creds.writeTokenStorageToStream(out, protobuf
          ? Credentials.SerializedFormat.PROTOBUF : Credentials.SerializedFormat.WRITABLE);
    }
    r.put("file", file);
    r.put("kind", token.getKind().toString());
    r.put("service", token.getService().toString());
    StringBuilder kinds = new StringBuilder();
    for (Token<?> t : tokens) {
      kinds.append(kinds.length() == 0 ? "" : ",").append(t.getKind());
    }
    r.put("kinds", kinds.toString());
  }

  void stop() {
    if (kdc != null) {
      kdc.stop();
    }
  }
}

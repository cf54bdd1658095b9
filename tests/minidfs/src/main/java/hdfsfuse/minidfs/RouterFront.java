package hdfsfuse.minidfs;

import java.io.File;
import java.net.InetSocketAddress;
import java.util.Collections;
import java.util.List;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.hdfs.server.federation.resolver.ActiveNamenodeResolver;
import org.apache.hadoop.hdfs.server.federation.resolver.FederationNamenodeContext;
import org.apache.hadoop.hdfs.server.federation.resolver.FederationNamenodeServiceState;
import org.apache.hadoop.hdfs.server.federation.router.Router;
import org.apache.hadoop.hdfs.server.federation.router.RouterClient;
import org.apache.hadoop.hdfs.server.federation.store.protocol.AddMountTableEntryRequest;
import org.apache.hadoop.hdfs.server.federation.store.protocol.RefreshMountTableEntriesRequest;
import org.apache.hadoop.hdfs.server.federation.store.records.MountTable;

/**
 * One Router-based federation front over the cluster's nameservices (minidfs-notes.md: "one
 * Router built by hand"): a file state store, no ZooKeeper, ns0 as the default nameservice.
 * Compiled only in the launcher's Hadoop 3.4.2 build (Maven profile "router"); Main loads it by
 * name, so the 3.5.0 build never needs hadoop-hdfs-rbf.
 */
public final class RouterFront implements Main.Front {
  private Router router;
  private Configuration conf;

  @Override
  public String start(Configuration base, List<String> nameservices, List<String> monitored, File dir)
      throws Exception {
    conf = new Configuration(base);
    conf.set("dfs.federation.router.rpc-address", "127.0.0.1:0");
    conf.set("dfs.federation.router.rpc-bind-host", "127.0.0.1");
    conf.set("dfs.federation.router.admin-address", "127.0.0.1:0");
    conf.set("dfs.federation.router.admin-bind-host", "127.0.0.1");
    conf.setBoolean("dfs.federation.router.http.enable", false);
    conf.set("dfs.federation.router.store.driver.class",
        "org.apache.hadoop.hdfs.server.federation.store.driver.impl.StateStoreFileImpl");
    conf.set("dfs.federation.router.store.driver.file.directory", new File(dir, "store").getAbsolutePath());
    conf.set("dfs.federation.router.monitor.namenode", String.join(",", monitored));
    conf.setBoolean("dfs.federation.router.monitor.localnamenode.enable", false);
    conf.setLong("dfs.federation.router.heartbeat.interval", 1000);
    conf.setLong("dfs.federation.router.cache.ttl", 1000);
    conf.setBoolean("dfs.federation.router.safemode.enable", false);
    conf.set("dfs.federation.router.default.nameserviceId", nameservices.get(0));
    conf.setBoolean("dfs.federation.router.default.nameservice.enable", true);
    router = new Router();
    router.init(conf);
    router.start();
    waitForNamenodes(nameservices);
    InetSocketAddress rpc = router.getRpcServerAddress();
    return "127.0.0.1:" + rpc.getPort();
  }

  private void waitForNamenodes(List<String> nameservices) throws Exception {
    ActiveNamenodeResolver resolver = router.getNamenodeResolver();
    long deadline = System.currentTimeMillis() + 60_000;
    for (String ns : nameservices) {
      while (true) {
        List<? extends FederationNamenodeContext> nns = resolver.getNamenodesForNameserviceId(ns, false);
        if (nns != null && !nns.isEmpty() && nns.get(0).getState() == FederationNamenodeServiceState.ACTIVE) {
          break;
        }
        if (System.currentTimeMillis() > deadline) {
          throw new IllegalStateException("the Router did not see an active NameNode of " + ns);
        }
        Thread.sleep(200);
      }
    }
  }

  @Override
  public void addMount(String src, String ns, String dst) throws Exception {
    InetSocketAddress admin = router.getAdminServerAddress();
    RouterClient client = new RouterClient(new InetSocketAddress("127.0.0.1", admin.getPort()), conf);
    try {
      MountTable entry = MountTable.newInstance(src, Collections.singletonMap(ns, dst),
          System.currentTimeMillis(), System.currentTimeMillis());
      if (!client.getMountTableManager().addMountTableEntry(
          AddMountTableEntryRequest.newInstance(entry)).getStatus()) {
        throw new IllegalStateException("the Router refused mount " + src + " -> " + ns + ":" + dst);
      }
      client.getMountTableManager().refreshMountTableEntries(RefreshMountTableEntriesRequest.newInstance());
    } finally {
      client.close();
    }
  }

  @Override
  public void stop() throws Exception {
    if (router != null) {
      router.stop();
    }
  }
}

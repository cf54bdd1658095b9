package hdfsfuse.minidfs;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.BufferedReader;
import java.io.FileReader;
import java.net.URI;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FSDataInputStream;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;

/**
 * The Java client contender for hdfsfuse's benchmarks, timed in-process.
 *
 * <p>Modes: {@code pread} (one open stream, positional reads), {@code stream} (open, seek, read
 * N bytes, close per read), {@code seekread} (one open stream, seek then read, as in
 * HDFS-7966), {@code seq} (stream the whole
 * file with 1 MiB reads), {@code stat} (getFileInfo round trips). Reads come from an offsets
 * file ("offset length" per line) so every contender reads the same bytes.
 *
 * <p>The referee's rule for every contender: do the warm-up reads ({@code --warmup-offsets}, as
 * positional reads), print {@code warmed}, wait for a line on stdin (the referee takes its
 * "before" counters then), run the timed reads, print one JSON line with the seconds, the bytes
 * and this JVM's CPU seconds during the timed reads.
 */
public final class Bench {
  public static void main(String[] args) throws Exception {
    String confDir = null;
    String uri = null;
    String mode = null;
    String path = null;
    String offsetsFile = null;
    String warmupFile = null;
    int threads = 1;
    int count = 1000;
    String keytab = null;
    String principal = null;
    for (int i = 0; i < args.length; i += 2) {
      switch (args[i]) {
        case "--conf-dir": confDir = args[i + 1]; break;
        case "--uri": uri = args[i + 1]; break;
        case "--mode": mode = args[i + 1]; break;
        case "--path": path = args[i + 1]; break;
        case "--offsets": offsetsFile = args[i + 1]; break;
        case "--threads": threads = Integer.parseInt(args[i + 1]); break;
        case "--count": count = Integer.parseInt(args[i + 1]); break;
        case "--warmup-offsets": warmupFile = args[i + 1]; break;
        case "--keytab": keytab = args[i + 1]; break;
        case "--principal": principal = args[i + 1]; break;
        case "--krb5-conf": System.setProperty("java.security.krb5.conf", args[i + 1]); break;
        default: throw new IllegalArgumentException("unknown option " + args[i]);
      }
    }
    Configuration conf = new Configuration();
    conf.addResource(new Path(confDir, "core-site.xml"));
    conf.addResource(new Path(confDir, "hdfs-site.xml"));
    if (keytab != null) {  // a secure cluster: log in as the client principal first
      org.apache.hadoop.security.UserGroupInformation.setConfiguration(conf);
      org.apache.hadoop.security.UserGroupInformation.loginUserFromKeytab(principal, keytab);
    }
    FileSystem fs = FileSystem.get(new URI(uri), conf);
    Path p = new Path(path);
    long[][] reads = offsetsFile == null ? new long[0][] : readOffsets(offsetsFile);

    ObjectNode r = new ObjectMapper().createObjectNode();
    r.put("mode", mode);
    r.put("threads", threads);
    // Warm the JVM and the connection cache on reads that are neither timed nor counted.
    if (warmupFile != null) {
      long[][] w = readOffsets(warmupFile);
      if (mode.equals("stat")) {
        run(fs, p, "stat", w, 1, w.length);
      } else {
        run(fs, p, mode.equals("seq") ? "pread" : mode, w, 1, count);
      }
    }
    System.out.println("warmed");
    System.out.flush();
    new BufferedReader(new java.io.InputStreamReader(System.in)).readLine();
    com.sun.management.OperatingSystemMXBean os =
        (com.sun.management.OperatingSystemMXBean) java.lang.management.ManagementFactory.getOperatingSystemMXBean();
    long cpu0 = os.getProcessCpuTime();
    long t0 = System.nanoTime();
    long bytes = run(fs, p, mode, reads, threads, count);
    double seconds = (System.nanoTime() - t0) / 1e9;
    r.put("cpu_seconds", (os.getProcessCpuTime() - cpu0) / 1e9);
    r.put("seconds", seconds);
    r.put("bytes", bytes);
    r.put("ops", mode.equals("seq") ? 1 : mode.equals("stat") ? count : reads.length);
    System.out.println(r);
    fs.close();
  }

  private static long[][] readOffsets(String file) throws Exception {
    List<long[]> out = new ArrayList<>();
    try (BufferedReader in = new BufferedReader(new FileReader(file))) {
      String line;
      while ((line = in.readLine()) != null) {
        String[] f = line.trim().split("\\s+");
        if (f.length == 2) {
          out.add(new long[] {Long.parseLong(f[0]), Long.parseLong(f[1])});
        }
      }
    }
    return out.toArray(new long[0][]);
  }

  private static long run(FileSystem fs, Path p, String mode, long[][] reads, int threads, int count)
      throws Exception {
    switch (mode) {
      case "stat": {
        for (int i = 0; i < count; i++) {
          fs.getFileStatus(p);
        }
        return 0;
      }
      case "seq": {
        byte[] buf = new byte[1 << 20];
        long n = 0;
        try (FSDataInputStream in = fs.open(p)) {
          int k;
          while ((k = in.read(buf)) > 0) {
            n += k;
          }
        }
        return n;
      }
      case "pread":
      case "stream":
      case "seekread": {
        ExecutorService pool = Executors.newFixedThreadPool(threads);
        List<Future<Long>> futures = new ArrayList<>();
        for (int t = 0; t < threads; t++) {
          final int tid = t;
          futures.add(pool.submit(() -> worker(fs, p, mode, reads, tid, threads)));
        }
        long total = 0;
        for (Future<Long> f : futures) {
          total += f.get();
        }
        pool.shutdown();
        return total;
      }
      default:
        throw new IllegalArgumentException("unknown mode " + mode);
    }
  }

  /** Thread `tid` of `threads` does every read i with i % threads == tid. */
  private static long worker(FileSystem fs, Path p, String mode, long[][] reads, int tid, int threads)
      throws Exception {
    long total = 0;
    int max = 0;
    for (long[] r : reads) {
      max = (int) Math.max(max, r[1]);
    }
    byte[] buf = new byte[max];
    if (mode.equals("pread")) {
      try (FSDataInputStream in = fs.open(p)) {
        for (int i = tid; i < reads.length; i += threads) {
          in.readFully(reads[i][0], buf, 0, (int) reads[i][1]);
          total += reads[i][1];
        }
      }
    } else if (mode.equals("seekread")) {
      try (FSDataInputStream in = fs.open(p)) {
        for (int i = tid; i < reads.length; i += threads) {
          in.seek(reads[i][0]);
          in.readFully(buf, 0, (int) reads[i][1]);
          total += reads[i][1];
        }
      }
    } else {
      for (int i = tid; i < reads.length; i += threads) {
        try (FSDataInputStream in = fs.open(p)) {
          in.seek(reads[i][0]);
          in.readFully(buf, 0, (int) reads[i][1]);
          total += reads[i][1];
        }
      }
    }
    return total;
  }
}

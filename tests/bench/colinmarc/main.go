// The colinmarc/hdfs (Go) benchmark contender, driven by the same rule as tests/bench/worker.py:
//
//	colinmarc-bench --namenode HOST:PORT --path P --offsets FILE|seq [--warmup-offsets FILE] [--threads N]
//
// It does the warm-up reads, prints "warmed", waits for a line on stdin (the referee reads its
// counters in between), does the timed reads and prints one JSON line {seconds, bytes,
// cpu_seconds}. Random reads use File.ReadAt (one open file per reader goroutine); "seq" reads
// the whole file with Read into a 1 MiB buffer.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/user"
	"sync"
	"syscall"
	"time"

	hdfs "github.com/colinmarc/hdfs/v2"
)

type read struct{ off, n int64 }

func offsets(path string) []read {
	if path == "" {
		return nil
	}
	f, err := os.Open(path)
	check(err)
	defer f.Close()
	var out []read
	s := bufio.NewScanner(f)
	for s.Scan() {
		var r read
		if _, err := fmt.Sscan(s.Text(), &r.off, &r.n); err == nil {
			out = append(out, r)
		}
	}
	return out
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func cpu() float64 {
	var u syscall.Rusage
	check(syscall.Getrusage(syscall.RUSAGE_SELF, &u))
	return float64(u.Utime.Sec+u.Stime.Sec) + float64(u.Utime.Usec+u.Stime.Usec)/1e6
}

func readAt(client *hdfs.Client, path string, part []read) int64 {
	f, err := client.Open(path)
	check(err)
	defer f.Close()
	var total int64
	buf := make([]byte, 0)
	for _, r := range part {
		if int64(cap(buf)) < r.n {
			buf = make([]byte, r.n)
		}
		n, err := f.ReadAt(buf[:r.n], r.off)
		if err != nil && err != io.EOF {
			check(err)
		}
		total += int64(n)
	}
	return total
}

func parallel(client *hdfs.Client, path string, reads []read, threads int) int64 {
	var wg sync.WaitGroup
	totals := make([]int64, threads)
	for t := 0; t < threads; t++ {
		var part []read
		for i := t; i < len(reads); i += threads {
			part = append(part, reads[i])
		}
		wg.Add(1)
		go func(t int, part []read) {
			defer wg.Done()
			totals[t] = readAt(client, path, part)
		}(t, part)
	}
	wg.Wait()
	var sum int64
	for _, n := range totals {
		sum += n
	}
	return sum
}

func sequential(client *hdfs.Client, path string) int64 {
	f, err := client.Open(path)
	check(err)
	defer f.Close()
	buf := make([]byte, 1<<20)
	var total int64
	for {
		n, err := f.Read(buf)
		total += int64(n)
		if err == io.EOF {
			return total
		}
		check(err)
	}
}

func main() {
	namenode := flag.String("namenode", "", "host:port")
	path := flag.String("path", "", "HDFS path")
	offsetsFile := flag.String("offsets", "", "offsets file, or seq")
	warmupFile := flag.String("warmup-offsets", "", "warm-up offsets file")
	threads := flag.Int("threads", 1, "reader goroutines")
	flag.Parse()
	me, err := user.Current()
	check(err)
	client, err := hdfs.NewClient(hdfs.ClientOptions{Addresses: []string{*namenode}, User: me.Username})
	check(err)
	parallel(client, *path, offsets(*warmupFile), 1)
	fmt.Println("warmed")
	bufio.NewReader(os.Stdin).ReadString('\n')
	c0, t0 := cpu(), time.Now()
	var n int64
	if *offsetsFile == "seq" {
		n = sequential(client, *path)
	} else {
		n = parallel(client, *path, offsets(*offsetsFile), *threads)
	}
	seconds, cpuSeconds := time.Since(t0).Seconds(), cpu()-c0
	out, _ := json.Marshal(map[string]float64{"seconds": seconds, "bytes": float64(n), "cpu_seconds": cpuSeconds})
	fmt.Println(string(out))
}

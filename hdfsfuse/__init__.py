"""hdfsfuse: a read-only FUSE filesystem for HDFS with pread-exact DataNode reads."""

__version__ = "0.1.0"

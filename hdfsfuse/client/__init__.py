"""The client library: open HDFS files and read exact byte ranges (`HdfsClient`)."""

from hdfsfuse.client.client import HdfsClient
from hdfsfuse.client.files import HdfsFile
from hdfsfuse.client.options import ClientOptions

__all__ = ["ClientOptions", "HdfsClient", "HdfsFile"]

"""Transparent encryption (HDFS encryption zones): a file's data is AES/CTR ciphertext on the
DataNodes, under a data key the KMS decrypts for whoever may read it.

    info          the file's encryption facts from the NameNode, checked (pure)
    ctr           AES/CTR decryption at any file offset (pure)
    keys          data keys held in memory: per identity and EDEK, while used and a while after (pure)
    kms_protocol  the KMS's REST calls, URIs, HTTP/1.1 framing and errors, bytes in and out (pure)
    kms           the trio adapter: one KMS call with its authentication and failover
"""

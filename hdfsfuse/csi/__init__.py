"""A Kubernetes CSI node plugin: each published volume is an hdfsfuse mount (`hdfsfuse csi`).

`volumes` checks a publish request (pure), `mounts` runs the mounts and keeps their records,
`service` is the gRPC Identity and Node services, `server` the process. See docs/kubernetes.md.
"""

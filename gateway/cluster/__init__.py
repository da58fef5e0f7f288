"""The gateway's side of cluster mode (`zookeeper.connect` set): composing a broker's cluster parts
(`node`), the connection followers fetch over (`link`), and the answers handlers give from the
cluster view (`metadata`, `admin`). The cluster logic itself is in rdmalog/cluster."""

//! gRPC protocol of the colball cluster (filled in by the cluster work).

//! Coordinator and worker of the colball cluster (filled in by the cluster work).

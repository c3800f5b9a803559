//! Compiles every `colball/v1/*.proto` with protox (pure Rust), so building
//! needs no protoc on the machine, and writes the file descriptor set that
//! the coordinator serves through gRPC server reflection.
//!
//! The coordinator's sides of `colball.v1.Solver` and `colball.v1.Jobs`
//! are generated a second time by tonic-build's manual builder, so that
//! `SolveBatch` and `Jobs.Submit` read their puzzles as
//! `colball_proto::ingest` types (the same bytes, decoded without an
//! allocation per puzzle) and `Solve`, `SolveBatch` and `Jobs.Results`
//! write `colball_proto::egress::PuzzleResult` (the same bytes, written
//! without an allocation per string); the other methods keep the generated
//! messages.

use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=colball/v1");
    let mut files = Vec::new();
    for entry in std::fs::read_dir("colball/v1")? {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "proto") {
            println!("cargo:rerun-if-changed={}", path.display());
            files.push(path);
        }
    }
    files.sort();
    let fds = protox::compile(&files, ["."])?;
    let out = PathBuf::from(std::env::var("OUT_DIR")?);
    std::fs::write(
        out.join("colball_descriptor.bin"),
        prost::Message::encode_to_vec(&fds),
    )?;
    // A result's path is read as a slice of the message's buffer (`Bytes`),
    // not copied into a vector of its own: one allocation less per result
    // on the coordinator.
    // Without the `grpc` feature, the messages alone (no tonic in them).
    let grpc = std::env::var_os("CARGO_FEATURE_GRPC").is_some();
    tonic_prost_build::configure()
        .build_client(grpc)
        .build_server(grpc)
        .bytes(".colball.v1.TaskSolved.path")
        .compile_fds(fds)?;
    if grpc {
        tonic_build::manual::Builder::new()
            .build_client(false)
            .compile(&[ingest_solver(), ingest_jobs()]);
    }
    Ok(())
}

/// A method of a service the coordinator serves, with prost's codec.
fn method(
    name: &str,
    route: &str,
    input: &str,
    output: &str,
) -> tonic_build::manual::MethodBuilder {
    tonic_build::manual::Method::builder()
        .name(name)
        .route_name(route)
        .input_type(input)
        .output_type(output)
        .codec_path("tonic_prost::ProstCodec")
}

/// `colball.v1.Jobs` as the coordinator serves it: `Submit` reads
/// `colball_proto::ingest::SubmitRequest`, `Results` writes
/// `colball_proto::egress::PuzzleResult`. Routes and messages are those of
/// `colball/v1/jobs.proto`.
fn ingest_jobs() -> tonic_build::manual::Service {
    tonic_build::manual::Service::builder()
        .name("Jobs")
        .package("colball.v1")
        .comment("The coordinator's side of `colball.v1.Jobs`.")
        .method(
            method(
                "submit",
                "Submit",
                "crate::ingest::SubmitRequest",
                "crate::v1::JobAccepted",
            )
            .client_streaming()
            .build(),
        )
        .method(method("get", "Get", "crate::v1::JobRef", "crate::v1::Job").build())
        .method(
            method(
                "list",
                "List",
                "crate::v1::ListJobsRequest",
                "crate::v1::JobList",
            )
            .build(),
        )
        .method(method("cancel", "Cancel", "crate::v1::JobRef", "crate::v1::Job").build())
        .method(
            method(
                "delete",
                "Delete",
                "crate::v1::JobRef",
                "crate::v1::DeleteJobResponse",
            )
            .build(),
        )
        .method(
            method(
                "results",
                "Results",
                "crate::v1::ResultsRequest",
                "crate::egress::PuzzleResult",
            )
            .server_streaming()
            .build(),
        )
        .build()
}

/// `colball.v1.Solver` as the coordinator serves it (see `src/ingest.rs`).
/// Routes and messages are those of `colball/v1/solver.proto`.
fn ingest_solver() -> tonic_build::manual::Service {
    tonic_build::manual::Service::builder()
        .name("Solver")
        .package("colball.v1")
        .comment("The coordinator's side of `colball.v1.Solver`.")
        .method(
            method(
                "solve",
                "Solve",
                "crate::v1::SolveRequest",
                "crate::egress::PuzzleResult",
            )
            .build(),
        )
        .method(
            method(
                "solve_batch",
                "SolveBatch",
                "crate::ingest::SolveBatchRequest",
                "crate::egress::PuzzleResult",
            )
            .server_streaming()
            .build(),
        )
        .method(
            method(
                "grade",
                "Grade",
                "crate::v1::GradeRequest",
                "crate::v1::GradeResult",
            )
            .server_streaming()
            .build(),
        )
        .method(
            method(
                "watch",
                "Watch",
                "crate::v1::WatchRequest",
                "crate::v1::ClusterEvent",
            )
            .server_streaming()
            .build(),
        )
        .build()
}

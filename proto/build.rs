//! Compiles colball/v1/*.proto with protox (pure Rust), so building needs no
//! protoc on the machine.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let files = [
        "colball/v1/types.proto",
        "colball/v1/solver.proto",
        "colball/v1/worker.proto",
    ];
    for file in files {
        println!("cargo:rerun-if-changed={file}");
    }
    let fds = protox::compile(files, ["."])?;
    tonic_prost_build::configure().compile_fds(fds)?;
    Ok(())
}

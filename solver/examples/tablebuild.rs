use colball_solver::Size;
use colball_solver::generate::Generator;
use colball_solver::table::DistanceTable;
fn main() {
    let threads: usize = std::env::args().nth(1).map_or(1, |s| s.parse().unwrap());
    let t = std::time::Instant::now();
    let table = DistanceTable::build(Generator::new(3).board(Size::new(4, 4).unwrap()), threads);
    println!(
        "4x4 table, {threads} threads: {:?}, radius {}",
        t.elapsed(),
        table.radius()
    );
}

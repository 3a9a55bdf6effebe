fn main() {
    let args: Vec<String> = std::env::args().collect();
    let lang = kidiom_miner::Lang::from_name(&args[1]).unwrap();
    let text = std::fs::read_to_string(&args[2]).unwrap();
    println!("{}", kidiom_miner::dump_tree(lang, &text).unwrap());
}

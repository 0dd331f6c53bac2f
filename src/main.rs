fn main() {
    print!("{}", mirrorflow::api::crds_yaml());
}

//! Prints the core Cluster API CRDs as YAML, ready for `kubectl apply -f -`.

fn main() -> anyhow::Result<()> {
    for crd in capi_core::crd::render_core()? {
        print!("{}", crd.yaml);
    }
    Ok(())
}

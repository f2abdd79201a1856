//! How long bootstrap data takes to produce: the rendering model, its two outputs (cloud-init and
//! Ignition), and the per-cluster PKI (the step DESIGN.md warns about: keys dominate).
#![allow(missing_docs)]

use std::hint::black_box;

use capi_bootstrap::api::{File, KubeadmConfigSpec};
use capi_bootstrap::pki::ClusterPki;
use capi_bootstrap::render::{
    self, ClusterFacts, KubernetesVersion, PlanFile, RenderInput, Role, cloud_init, ignition,
};
use criterion::{Criterion, criterion_group, criterion_main};

/// A worker's config as the templates produce it, with a few user files and a provider's
/// cloud.conf.
fn spec() -> KubeadmConfigSpec {
    KubeadmConfigSpec {
        files: (0..4)
            .map(|i| File {
                path: format!("/etc/demo/file-{i}.conf"),
                permissions: Some("0644".into()),
                content: Some("key = value\n".repeat(20)),
                ..File::default()
            })
            .collect(),
        pre_kubeadm_commands: vec!["systemctl restart containerd".into()],
        post_kubeadm_commands: vec!["echo done".into()],
        ..KubeadmConfigSpec::default()
    }
}

fn input(spec: &KubeadmConfigSpec) -> RenderInput<'_> {
    RenderInput {
        spec,
        role: Role::JoinWorker {
            token: "abcdef.0123456789abcdef".into(),
            ca_cert_hashes: vec![format!("sha256:{}", "ab".repeat(32))],
        },
        version: KubernetesVersion::parse("v1.33.0").unwrap_or_else(|e| panic!("{e}")),
        cluster: ClusterFacts::new("demo", "10.0.0.1:6443"),
        resolved_files: vec![],
        extra_files: vec![PlanFile::new(
            "/etc/kubernetes/cloud.conf",
            0o600,
            "[Global]\nauth-url = \"https://keystone.example:5000/v3\"\n",
        )],
    }
}

fn bootstrap(c: &mut Criterion) {
    let spec = spec();
    let input = input(&spec);
    let plan = render::plan(&input).unwrap_or_else(|e| panic!("{e}"));
    c.bench_function("bootstrap_plan", |b| {
        b.iter(|| render::plan(black_box(&input)))
    });
    c.bench_function("bootstrap_cloud_init", |b| {
        b.iter(|| cloud_init::render(black_box(&plan)))
    });
    c.bench_function("bootstrap_ignition", |b| {
        b.iter(|| ignition::render(black_box(&plan)))
    });
    c.bench_function("bootstrap_cluster_pki", |b| b.iter(ClusterPki::generate));
}

criterion_group!(benches, bootstrap);
criterion_main!(benches);

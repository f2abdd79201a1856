//! The provider's ARM models (`provider_azure::arm::models`) against Azure's own (the official
//! Python SDKs' models of the pinned api-versions, `common::model_checker`): the body of every
//! kind of request the provider sends passes as a request, and that body completed as ARM answers
//! it (IDs, names, types, provisioning states, assigned addresses) passes as a response and reads
//! back into the same model.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::model_checker::{Direction, ModelChecker};
use provider_azure::arm::models::*;
use provider_azure::arm::{ResourceId, ResourceType};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

const SUB: &str = "5b3ab0a0-7f4c-4b4e-9d8f-1c2d3e4f5a6b";
const RG: &str = "demo";

fn id(kind: ResourceType, name: &str) -> ResourceId {
    ResourceId::new(SUB, RG, kind, name)
}

fn tags() -> Tags {
    [
        (
            "sigs.k8s.io_cluster-api-provider-azure_cluster_demo",
            "owned",
        ),
        ("capi-rs.dev_cluster", "ns/demo"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

fn succeeded() -> Option<ProvisioningState> {
    Some(ProvisioningState("Succeeded".into()))
}

fn identity(id: &ResourceId) -> Identity {
    Identity {
        id: Some(id.to_string()),
        name: Some(id.name.clone()),
        type_: Some(match id.kind.namespace() {
            Some(ns) => format!("{ns}/{}", id.kind.collection()),
            None => format!("Microsoft.Resources/{}", id.kind.collection()),
        }),
    }
}

/// `request` passes as a request of `kind`, `response` as its response, and `response` reads
/// back into the model.
async fn both_ways<T: Serialize + DeserializeOwned + PartialEq + std::fmt::Debug>(
    checker: &ModelChecker,
    kind: ResourceType,
    request: &T,
    response: &T,
) {
    let body = serde_json::to_value(request).unwrap();
    if let Err(problems) = checker.check(kind.model(), Direction::Request, &body).await {
        panic!("{kind:?} request {body:#}:\n{problems:#?}");
    }
    let answer = serde_json::to_value(response).unwrap();
    if let Err(problems) = checker
        .check(kind.model(), Direction::Response, &answer)
        .await
    {
        panic!("{kind:?} response {answer:#}:\n{problems:#?}");
    }
    let read: T = serde_json::from_value(answer).unwrap();
    assert_eq!(&read, response);
}

#[tokio::test]
async fn every_body_the_provider_sends_and_reads_is_one_azure_takes_and_gives() {
    let checker = ModelChecker::start();
    let location = "westeurope".to_string();

    // Resource group.
    let group = ResourceId::resource_group(SUB, RG);
    let request = ResourceGroup {
        location: location.clone(),
        tags: tags(),
        ..ResourceGroup::default()
    };
    let mut response = request.clone();
    response.identity = identity(&group);
    response.properties = Some(StateOnly {
        provisioning_state: succeeded(),
    });
    both_ways(&checker, ResourceType::ResourceGroup, &request, &response).await;

    // Network security group with the control plane's rules.
    let nsg = id(ResourceType::NetworkSecurityGroup, "demo-controlplane-nsg");
    let rule = |name: &str, priority, port: &str| SecurityRule {
        id: None,
        name: name.into(),
        properties: SecurityRuleProperties {
            description: Some(format!("allow port {port}")),
            protocol: "Tcp".into(),
            source_port_range: Some("*".into()),
            destination_port_range: Some(port.into()),
            source_address_prefix: Some("*".into()),
            destination_address_prefix: Some("*".into()),
            access: "Allow".into(),
            priority,
            direction: "Inbound".into(),
            ..SecurityRuleProperties::default()
        },
    };
    let request = NetworkSecurityGroup {
        location: location.clone(),
        tags: tags(),
        properties: NetworkSecurityGroupProperties {
            security_rules: vec![
                rule("allow_ssh", 2200, "22"),
                rule("allow_apiserver", 2201, "6443"),
            ],
            ..NetworkSecurityGroupProperties::default()
        },
        ..NetworkSecurityGroup::default()
    };
    let mut response = request.clone();
    response.identity = identity(&nsg);
    response.properties.provisioning_state = succeeded();
    for rule in &mut response.properties.security_rules {
        rule.id = Some(format!("{nsg}/securityRules/{}", rule.name));
        rule.properties.provisioning_state = succeeded();
    }
    both_ways(
        &checker,
        ResourceType::NetworkSecurityGroup,
        &request,
        &response,
    )
    .await;

    // Virtual network with its subnet, and the subnet alone.
    let vnet = id(ResourceType::VirtualNetwork, "demo-vnet");
    let subnet_id = vnet.child(ResourceType::Subnet, "demo-controlplane-subnet");
    let subnet = Subnet {
        id: None,
        name: Some(subnet_id.name.clone()),
        properties: Some(SubnetProperties {
            address_prefixes: vec!["10.0.0.0/16".into()],
            network_security_group: Some(SubResource::to(&nsg)),
            ..SubnetProperties::default()
        }),
    };
    let request = VirtualNetwork {
        location: location.clone(),
        tags: tags(),
        properties: VirtualNetworkProperties {
            address_space: AddressSpace {
                address_prefixes: vec!["10.0.0.0/8".into()],
            },
            subnets: vec![subnet.clone()],
            provisioning_state: None,
        },
        ..VirtualNetwork::default()
    };
    let mut answered_subnet = subnet.clone();
    answered_subnet.id = Some(subnet_id.to_string());
    if let Some(p) = answered_subnet.properties.as_mut() {
        p.provisioning_state = succeeded();
        p.ip_configurations = vec![SubResource::to(format!(
            "{}/ipConfigurations/ipconfig1",
            id(ResourceType::NetworkInterface, "demo-cp-x-nic")
        ))];
    }
    let mut response = request.clone();
    response.identity = identity(&vnet);
    response.properties.provisioning_state = succeeded();
    response.properties.subnets = vec![answered_subnet.clone()];
    both_ways(&checker, ResourceType::VirtualNetwork, &request, &response).await;
    let alone = Subnet {
        name: None,
        ..subnet.clone()
    };
    both_ways(&checker, ResourceType::Subnet, &alone, &answered_subnet).await;

    // The API server's public IP and load balancer.
    let pip = id(ResourceType::PublicIpAddress, "pip-demo-apiserver");
    let request = PublicIpAddress {
        location: location.clone(),
        tags: tags(),
        sku: Some(Sku {
            name: "Standard".into(),
        }),
        properties: PublicIpAddressProperties {
            public_ip_allocation_method: "Static".into(),
            public_ip_address_version: "IPv4".into(),
            dns_settings: Some(DnsSettings {
                domain_name_label: "demo-1a2b3c4d".into(),
                fqdn: None,
            }),
            ..PublicIpAddressProperties::default()
        },
        ..PublicIpAddress::default()
    };
    let lb = id(ResourceType::LoadBalancer, "demo-public-lb");
    let mut response = request.clone();
    response.identity = identity(&pip);
    response.properties.ip_address = Some("20.61.5.7".into());
    response.properties.provisioning_state = succeeded();
    response.properties.ip_configuration = Some(SubResource::to(format!(
        "{lb}/frontendIPConfigurations/demo-public-lb-frontEnd"
    )));
    if let Some(dns) = response.properties.dns_settings.as_mut() {
        dns.fqdn = Some("demo-1a2b3c4d.westeurope.cloudapp.azure.com".into());
    }
    both_ways(&checker, ResourceType::PublicIpAddress, &request, &response).await;

    let child = |collection: &str, name: &str| format!("{lb}/{collection}/{name}");
    let request = LoadBalancer {
        location: location.clone(),
        tags: tags(),
        sku: Some(Sku {
            name: "Standard".into(),
        }),
        properties: LoadBalancerProperties {
            frontend_ip_configurations: vec![Child {
                id: None,
                name: "demo-public-lb-frontEnd".into(),
                properties: Some(FrontendIpConfigurationProperties {
                    public_ip_address: Some(SubResource::to(&pip)),
                    provisioning_state: None,
                }),
            }],
            backend_address_pools: vec![Child {
                id: None,
                name: "demo-public-lb-backendPool".into(),
                properties: None,
            }],
            probes: vec![Child {
                id: None,
                name: "HTTPSProbe".into(),
                properties: Some(ProbeProperties {
                    protocol: "Https".into(),
                    port: 6443,
                    request_path: Some("/readyz".into()),
                    interval_in_seconds: Some(15),
                    number_of_probes: Some(1),
                    provisioning_state: None,
                }),
            }],
            load_balancing_rules: vec![Child {
                id: None,
                name: "LBRuleHTTPS".into(),
                properties: Some(LoadBalancingRuleProperties {
                    frontend_ip_configuration: SubResource::to(child(
                        "frontendIPConfigurations",
                        "demo-public-lb-frontEnd",
                    )),
                    backend_address_pool: SubResource::to(child(
                        "backendAddressPools",
                        "demo-public-lb-backendPool",
                    )),
                    probe: SubResource::to(child("probes", "HTTPSProbe")),
                    protocol: "Tcp".into(),
                    frontend_port: 6443,
                    backend_port: 6443,
                    idle_timeout_in_minutes: Some(4),
                    enable_floating_ip: false,
                    disable_outbound_snat: true,
                    provisioning_state: None,
                }),
            }],
            provisioning_state: None,
        },
        ..LoadBalancer::default()
    };
    let nic = id(ResourceType::NetworkInterface, "demo-cp-x-nic");
    let mut response = request.clone();
    response.identity = identity(&lb);
    response.properties.provisioning_state = succeeded();
    let p = &mut response.properties;
    for f in &mut p.frontend_ip_configurations {
        f.id = Some(child("frontendIPConfigurations", &f.name));
    }
    for b in &mut p.backend_address_pools {
        b.id = Some(child("backendAddressPools", &b.name));
        b.properties = Some(BackendAddressPoolProperties {
            backend_ip_configurations: vec![SubResource::to(format!(
                "{nic}/ipConfigurations/ipconfig1"
            ))],
            provisioning_state: succeeded(),
        });
    }
    for probe in &mut p.probes {
        probe.id = Some(child("probes", &probe.name));
    }
    for rule in &mut p.load_balancing_rules {
        rule.id = Some(child("loadBalancingRules", &rule.name));
    }
    both_ways(&checker, ResourceType::LoadBalancer, &request, &response).await;

    // A control-plane machine's network interface and VM.
    let vm = id(ResourceType::VirtualMachine, "demo-cp-x");
    let request = NetworkInterface {
        location: location.clone(),
        tags: tags(),
        properties: NetworkInterfaceProperties {
            ip_configurations: vec![Child {
                id: None,
                name: "ipconfig1".into(),
                properties: Some(IpConfigurationProperties {
                    subnet: Some(SubResource::to(&subnet_id)),
                    private_ip_allocation_method: "Dynamic".into(),
                    primary: Some(true),
                    load_balancer_backend_address_pools: vec![SubResource::to(child(
                        "backendAddressPools",
                        "demo-public-lb-backendPool",
                    ))],
                    ..IpConfigurationProperties::default()
                }),
            }],
            enable_ip_forwarding: Some(false),
            ..NetworkInterfaceProperties::default()
        },
        ..NetworkInterface::default()
    };
    let mut response = request.clone();
    response.identity = identity(&nic);
    response.properties.provisioning_state = succeeded();
    response.properties.virtual_machine = Some(SubResource::to(&vm));
    for c in &mut response.properties.ip_configurations {
        c.id = Some(format!("{nic}/ipConfigurations/{}", c.name));
        if let Some(p) = c.properties.as_mut() {
            p.private_ip_address = Some("10.0.0.4".into());
            p.provisioning_state = succeeded();
        }
    }
    both_ways(
        &checker,
        ResourceType::NetworkInterface,
        &request,
        &response,
    )
    .await;

    let request = VirtualMachine {
        location: location.clone(),
        tags: tags(),
        zones: vec!["1".into()],
        properties: VirtualMachineProperties {
            hardware_profile: HardwareProfile {
                vm_size: "Standard_D2s_v3".into(),
            },
            storage_profile: StorageProfile {
                image_reference: Some(ImageReference {
                    community_gallery_image_id: Some(
                        "/CommunityGalleries/ClusterAPI-f72ceb4f-5159-4c26-a0fe-2ea738f0d019/Images/capi-ubun2-2404/Versions/1.33.0".into(),
                    ),
                    ..ImageReference::default()
                }),
                os_disk: OsDisk {
                    name: Some("demo-cp-x_OSDisk".into()),
                    os_type: Some("Linux".into()),
                    create_option: "FromImage".into(),
                    delete_option: Some("Delete".into()),
                    caching: Some("ReadWrite".into()),
                    disk_size_gb: Some(128),
                    managed_disk: Some(ManagedDiskParameters {
                        storage_account_type: Some("Premium_LRS".into()),
                        id: None,
                    }),
                },
                data_disks: vec![DataDisk {
                    lun: 0,
                    name: Some("demo-cp-x_etcddisk".into()),
                    create_option: "Empty".into(),
                    delete_option: Some("Delete".into()),
                    caching: Some("ReadWrite".into()),
                    disk_size_gb: Some(256),
                    managed_disk: None,
                }],
            },
            os_profile: Some(OsProfile {
                computer_name: Some("demo-cp-x".into()),
                admin_username: Some("capi".into()),
                custom_data: Some("I2Nsb3VkLWNvbmZpZwo=".into()),
                linux_configuration: Some(LinuxConfiguration {
                    disable_password_authentication: true,
                    ssh: Some(SshConfiguration {
                        public_keys: vec![SshPublicKey {
                            path: "/home/capi/.ssh/authorized_keys".into(),
                            key_data: "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAA".into(),
                        }],
                    }),
                }),
            }),
            network_profile: NetworkProfile {
                network_interfaces: vec![NetworkInterfaceReference {
                    id: nic.to_string(),
                    properties: Some(NetworkInterfaceReferenceProperties {
                        primary: Some(true),
                        delete_option: Some("Detach".into()),
                    }),
                }],
            },
            priority: Some("Spot".into()),
            eviction_policy: Some("Deallocate".into()),
            billing_profile: Some(BillingProfile { max_price: -1.0 }),
            ..VirtualMachineProperties::default()
        },
        ..VirtualMachine::default()
    };
    assert!(
        !format!("{request:?}").contains("I2Nsb3VkLWNvbmZpZwo="),
        "the bootstrap data never shows in Debug output"
    );
    let mut response = request.clone();
    response.identity = identity(&vm);
    response.properties.vm_id = Some("0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0".into());
    response.properties.provisioning_state = succeeded();
    if let Some(os) = response.properties.os_profile.as_mut() {
        os.custom_data = None;
    }
    response.properties.storage_profile.os_disk.managed_disk = Some(ManagedDiskParameters {
        storage_account_type: Some("Premium_LRS".into()),
        id: Some(id(ResourceType::Disk, "demo-cp-x_OSDisk").to_string()),
    });
    both_ways(&checker, ResourceType::VirtualMachine, &request, &response).await;

    // A disk as ARM lists it.
    let disk = id(ResourceType::Disk, "demo-cp-x_OSDisk");
    let answer: Value = json!({
        "id": disk.to_string(), "name": disk.name, "type": "Microsoft.Compute/disks",
        "location": location, "tags": tags(), "managedBy": vm.to_string(),
        "properties": {"diskSizeGB": 128, "diskState": "Attached", "provisioningState": "Succeeded",
                       "creationData": {"createOption": "FromImage"}},
    });
    checker
        .check(ResourceType::Disk.model(), Direction::Response, &answer)
        .await
        .unwrap();
    let read: Disk = serde_json::from_value(answer).unwrap();
    assert_eq!(read.managed_by, Some(vm.to_string()));
    assert_eq!(checker.checked(), 17, "8 kinds both ways, and a disk");
}

//! A machine's network interface and VM as the provider wants them, from the `AzureMachine`,
//! its Machine and its cluster, through the typed ARM models.

use base64::Engine;
use capi_core::ActuatorError;
use serde_json::Value;

use crate::api::{Image, SubnetRole};
use crate::arm::models::{
    BillingProfile, Child, DataDisk, HardwareProfile, ImageReference, IpConfigurationProperties,
    LinuxConfiguration, ManagedDiskParameters, NetworkInterface, NetworkInterfaceProperties,
    NetworkInterfaceReference, NetworkInterfaceReferenceProperties, NetworkProfile, OsDisk,
    OsProfile, PublicIpAddress, PublicIpAddressProperties, Sku, SshConfiguration, SshPublicKey,
    StorageProfile, SubResource, VirtualMachine, VirtualMachineProperties,
};
use crate::naming::Role;

use super::Ctx;

/// The VM's admin user (CAPZ's).
pub const ADMIN_USER: &str = "capi";

/// The most bootstrap data a VM takes (`customData`: 64 KiB before base64).
pub const MAX_CUSTOM_DATA: usize = 65_535;

/// The community gallery of CAPZ's reference images, used when a machine names no image.
pub const REFERENCE_GALLERY: &str = "ClusterAPI-f72ceb4f-5159-4c26-a0fe-2ea738f0d019";
/// The reference image.
pub const REFERENCE_IMAGE: &str = "capi-ubun2-2404";

fn json<T: serde::Serialize>(value: &T) -> Value {
    serde_json::to_value(value).unwrap_or(Value::Null)
}

fn enum_str<T: serde::Serialize>(value: &T) -> Option<String> {
    json(value).as_str().map(str::to_string)
}

/// The image reference of `image`, else CAPZ's reference image for Kubernetes `version`.
pub fn image_reference(
    image: Option<&Image>,
    version: Option<&str>,
) -> Result<ImageReference, ActuatorError> {
    match image {
        Some(Image { id: Some(id), .. }) => Ok(ImageReference {
            id: Some(id.clone()),
            ..ImageReference::default()
        }),
        Some(Image {
            marketplace: Some(market),
            ..
        }) => {
            if market.third_party_image {
                return Err(ActuatorError::invalid_configuration(
                    "ThirdPartyImageUnsupported",
                    "spec.image.marketplace.thirdPartyImage needs a purchase plan, which this \
                     provider does not send yet; use an image without a plan",
                ));
            }
            Ok(ImageReference {
                publisher: Some(market.publisher.clone()),
                offer: Some(market.offer.clone()),
                sku: Some(market.sku.clone()),
                version: Some(market.version.clone()),
                ..ImageReference::default()
            })
        }
        Some(Image {
            compute_gallery: Some(gallery),
            ..
        }) => Ok(ImageReference {
            community_gallery_image_id: Some(format!(
                "/CommunityGalleries/{}/Images/{}/Versions/{}",
                gallery.gallery, gallery.name, gallery.version
            )),
            ..ImageReference::default()
        }),
        _ => {
            let version = version
                .map(|v| v.trim_start_matches('v'))
                .filter(|v| !v.is_empty());
            let Some(version) = version else {
                return Err(ActuatorError::invalid_configuration(
                    "NoImage",
                    "spec.image is unset and the Machine has no spec.version to pick CAPZ's \
                     reference image by; set one of them",
                ));
            };
            Ok(ImageReference {
                community_gallery_image_id: Some(format!(
                    "/CommunityGalleries/{REFERENCE_GALLERY}/Images/{REFERENCE_IMAGE}/Versions/{version}"
                )),
                ..ImageReference::default()
            })
        }
    }
}

/// The bootstrap data as `customData` (base64), within Azure's limit ([`MAX_CUSTOM_DATA`]).
pub(crate) fn custom_data(bootstrap: &capi_core::BootstrapData) -> Result<String, ActuatorError> {
    let data = bootstrap.expose();
    if data.len() > MAX_CUSTOM_DATA {
        return Err(ActuatorError::invalid_configuration(
            "BootstrapDataTooLarge",
            format!(
                "the bootstrap data is {} bytes; Azure's customData takes at most {MAX_CUSTOM_DATA}",
                data.len()
            ),
        ));
    }
    Ok(base64::engine::general_purpose::STANDARD.encode(data))
}

/// The SSH key: the spec's (base64 of an `authorized_keys` line); else `existing`, the key the
/// resource already has (ARM answers it), so that putting it again changes nothing; else a fresh
/// Ed25519 public key made from the system's randomness, whose private half is dropped here and
/// never stored anywhere — nobody can log in with it, and nothing it is derived from is known.
pub fn ssh_key(spec_key: Option<&str>, existing: Option<&str>) -> Result<String, ActuatorError> {
    if let Some(encoded) = spec_key.filter(|k| !k.is_empty()) {
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(encoded)
            .ok()
            .and_then(|b| String::from_utf8(b).ok())
            .ok_or_else(|| {
                ActuatorError::invalid_configuration(
                    "InvalidSSHPublicKey",
                    "spec.sshPublicKey is not base64 of an authorized_keys line",
                )
            })?;
        return Ok(decoded.trim().to_string());
    }
    if let Some(existing) = existing.map(str::trim).filter(|k| !k.is_empty()) {
        return Ok(existing.to_string());
    }
    let unavailable =
        || ActuatorError::transient_message("SSHKeyUnavailable", "could not make an SSH key");
    let random = ring::rand::SystemRandom::new();
    let pkcs8 =
        ring::signature::Ed25519KeyPair::generate_pkcs8(&random).map_err(|_| unavailable())?;
    let pair =
        ring::signature::Ed25519KeyPair::from_pkcs8(pkcs8.as_ref()).map_err(|_| unavailable())?;
    let public = ring::signature::KeyPair::public_key(&pair)
        .as_ref()
        .to_vec();
    let mut blob = Vec::new();
    for part in [b"ssh-ed25519".as_slice(), public.as_slice()] {
        blob.extend_from_slice(&u32::try_from(part.len()).unwrap_or(0).to_be_bytes());
        blob.extend_from_slice(part);
    }
    Ok(format!(
        "ssh-ed25519 {} unheld",
        base64::engine::general_purpose::STANDARD.encode(blob)
    ))
}

/// The SSH key a VM or a scale set's model has (`osProfile.linuxConfiguration.ssh`), as ARM
/// answers it.
pub(crate) fn existing_ssh_key(os_profile: &Value) -> Option<&str> {
    os_profile["linuxConfiguration"]["ssh"]["publicKeys"][0]["keyData"].as_str()
}

impl Ctx {
    pub(crate) fn role(&self) -> Role {
        if self.control_plane {
            Role::ControlPlane
        } else {
            Role::Node
        }
    }

    fn tags(&self, name: &str) -> crate::arm::models::Tags {
        let mut additional = self.infra.spec.additional_tags.clone();
        for (k, v) in &self.cluster.cluster.spec.additional_tags {
            additional.entry(k.clone()).or_insert_with(|| v.clone());
        }
        self.cluster.naming.tags(self.role(), name, &additional)
    }

    pub(crate) fn machine_public_ip_body(&self) -> Value {
        json(&PublicIpAddress {
            location: self.cluster.cluster.spec.location.clone(),
            tags: self.tags(&self.names.public_ip()),
            sku: Some(Sku {
                name: "Standard".into(),
            }),
            zones: self.zone.iter().cloned().collect(),
            properties: PublicIpAddressProperties {
                public_ip_allocation_method: "Static".into(),
                public_ip_address_version: "IPv4".into(),
                ..PublicIpAddressProperties::default()
            },
            ..PublicIpAddress::default()
        })
    }

    pub(crate) fn nic_body(&self) -> Value {
        let subnet_role = if self.control_plane {
            SubnetRole::ControlPlane
        } else {
            SubnetRole::Node
        };
        let pools = if self.control_plane {
            vec![SubResource::to(crate::cluster::backend_pool_id(
                &self.cluster,
            ))]
        } else {
            Vec::new()
        };
        json(&NetworkInterface {
            location: self.cluster.cluster.spec.location.clone(),
            tags: self.tags(&self.names.nic()),
            properties: NetworkInterfaceProperties {
                ip_configurations: vec![Child {
                    id: None,
                    name: self.names.ip_configuration().into(),
                    properties: Some(IpConfigurationProperties {
                        subnet: Some(SubResource::to(self.cluster.subnet_id(subnet_role))),
                        private_ip_allocation_method: "Dynamic".into(),
                        primary: Some(true),
                        public_ip_address: self
                            .infra
                            .spec
                            .allocate_public_ip
                            .then(|| SubResource::to(self.public_ip_id())),
                        load_balancer_backend_address_pools: pools,
                        ..IpConfigurationProperties::default()
                    }),
                }],
                enable_ip_forwarding: self.infra.spec.enable_ip_forwarding.then_some(true),
                ..NetworkInterfaceProperties::default()
            },
            ..NetworkInterface::default()
        })
    }

    /// The VM, with `custom_data` (base64 of the bootstrap data) and the SSH key of `existing`
    /// (the VM as ARM answered it, when it is put again).
    pub(crate) fn vm_body(
        &self,
        custom_data: Option<String>,
        existing: Option<&Value>,
    ) -> Result<Value, ActuatorError> {
        let spec = &self.infra.spec;
        let image = image_reference(spec.image.as_ref(), self.version.as_deref())?;
        let managed = |disk: Option<&crate::api::ManagedDisk>| {
            disk.and_then(|d| d.storage_account_type)
                .map(|t| ManagedDiskParameters {
                    storage_account_type: Some(t.as_str().to_string()),
                    id: None,
                })
        };
        let data_disks = spec
            .data_disks
            .iter()
            .enumerate()
            .map(|(i, disk)| DataDisk {
                lun: disk.lun.unwrap_or_else(|| i32::try_from(i).unwrap_or(0)),
                name: Some(self.names.data_disk(&disk.name_suffix)),
                create_option: "Empty".into(),
                delete_option: Some("Delete".into()),
                caching: disk.caching_type.as_ref().and_then(enum_str),
                disk_size_gb: Some(disk.disk_size_gb),
                managed_disk: managed(disk.managed_disk.as_ref()),
            })
            .collect();
        let (priority, eviction_policy, billing_profile) = match &spec.spot_vm_options {
            None => (None, None, None),
            Some(spot) => {
                let max_price = match spot.max_price.as_deref() {
                    None => None,
                    Some(price) => Some(BillingProfile {
                        max_price: price.trim().parse::<f64>().map_err(|_| {
                            ActuatorError::invalid_configuration(
                                "InvalidSpotMaxPrice",
                                format!("spec.spotVMOptions.maxPrice {price:?} is not a number"),
                            )
                        })?,
                    }),
                };
                (
                    Some("Spot".to_string()),
                    Some(
                        spot.eviction_policy
                            .as_ref()
                            .and_then(enum_str)
                            .unwrap_or_else(|| "Deallocate".into()),
                    ),
                    max_price,
                )
            }
        };
        Ok(json(&VirtualMachine {
            location: self.cluster.cluster.spec.location.clone(),
            tags: self.tags(&self.names.vm),
            zones: self.zone.iter().cloned().collect(),
            properties: VirtualMachineProperties {
                hardware_profile: HardwareProfile {
                    vm_size: spec.vm_size.clone(),
                },
                storage_profile: StorageProfile {
                    image_reference: Some(image),
                    os_disk: OsDisk {
                        name: Some(self.names.os_disk()),
                        os_type: Some("Linux".into()),
                        create_option: "FromImage".into(),
                        delete_option: Some("Delete".into()),
                        caching: spec.os_disk.caching_type.as_ref().and_then(enum_str),
                        disk_size_gb: spec.os_disk.disk_size_gb,
                        managed_disk: managed(spec.os_disk.managed_disk.as_ref()),
                    },
                    data_disks,
                },
                os_profile: Some(OsProfile {
                    computer_name: Some(self.names.vm.clone()),
                    admin_username: Some(ADMIN_USER.into()),
                    custom_data,
                    linux_configuration: Some(LinuxConfiguration {
                        disable_password_authentication: true,
                        ssh: Some(SshConfiguration {
                            public_keys: vec![SshPublicKey {
                                path: format!("/home/{ADMIN_USER}/.ssh/authorized_keys"),
                                key_data: ssh_key(
                                    spec.ssh_public_key.as_deref(),
                                    existing.and_then(|vm| {
                                        existing_ssh_key(&vm["properties"]["osProfile"])
                                    }),
                                )?,
                            }],
                        }),
                    }),
                }),
                network_profile: NetworkProfile {
                    network_interfaces: vec![NetworkInterfaceReference {
                        id: self.nic_id().to_string(),
                        properties: Some(NetworkInterfaceReferenceProperties {
                            primary: Some(true),
                            delete_option: Some("Delete".into()),
                        }),
                    }],
                },
                priority,
                eviction_policy,
                billing_profile,
                ..VirtualMachineProperties::default()
            },
            ..VirtualMachine::default()
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{ComputeGalleryImage, MarketplaceImage};

    #[test]
    fn the_image_is_the_specs_or_capzs_reference_image_for_the_version() {
        let reference = image_reference(None, Some("v1.33.1")).unwrap_or_default();
        assert_eq!(
            reference.community_gallery_image_id.as_deref(),
            Some(
                "/CommunityGalleries/ClusterAPI-f72ceb4f-5159-4c26-a0fe-2ea738f0d019/Images/capi-ubun2-2404/Versions/1.33.1"
            )
        );
        assert!(image_reference(None, None).is_err());
        let market = Image {
            marketplace: Some(MarketplaceImage {
                publisher: "Canonical".into(),
                offer: "ubuntu-24_04-lts".into(),
                sku: "server".into(),
                version: "latest".into(),
                third_party_image: false,
            }),
            ..Image::default()
        };
        let reference = image_reference(Some(&market), None).unwrap_or_default();
        assert_eq!(reference.publisher.as_deref(), Some("Canonical"));
        let gallery = Image {
            compute_gallery: Some(ComputeGalleryImage {
                gallery: "g".into(),
                name: "i".into(),
                version: "1.0.0".into(),
            }),
            ..Image::default()
        };
        assert_eq!(
            image_reference(Some(&gallery), None)
                .unwrap_or_default()
                .community_gallery_image_id
                .as_deref(),
            Some("/CommunityGalleries/g/Images/i/Versions/1.0.0")
        );
    }

    #[test]
    fn a_machine_without_a_key_gets_a_random_unheld_key_and_keeps_the_one_it_has() {
        let a = ssh_key(None, None).unwrap_or_default();
        // Nothing it is made from is known: two makings differ.
        assert_ne!(a, ssh_key(None, None).unwrap_or_default());
        assert!(
            a.starts_with("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAI"),
            "{a}"
        );
        // A resource put again keeps the key it has.
        assert_eq!(ssh_key(None, Some(&a)).unwrap_or_default(), a);
        let given = base64::engine::general_purpose::STANDARD.encode("ssh-rsa AAAAB3 me@host\n");
        assert_eq!(
            ssh_key(Some(&given), Some(&a)).unwrap_or_default(),
            "ssh-rsa AAAAB3 me@host"
        );
        assert!(ssh_key(Some("!!"), None).is_err());
    }
}

//! The provider's view of AWS. So far: how an AWS error answer is classified and what of it
//! reaches the user ([`error`]). The EC2 and ELBv2 traits and their SDK adapters follow.

pub mod error;

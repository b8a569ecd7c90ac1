pub mod allowance_deduct;
pub mod plan_create;
pub mod subscription_collect;
pub mod subscription_create;

pub use allowance_deduct::*;
pub use plan_create::*;
pub use subscription_collect::*;
pub use subscription_create::*;

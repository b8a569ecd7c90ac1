pub mod allowance_deduct;
pub mod allowance_set_cap;
pub mod plan_create;
pub mod plan_manage;
pub mod subscription_close;
pub mod subscription_collect;
pub mod subscription_create;
pub mod subscription_status;

pub use allowance_deduct::*;
pub use allowance_set_cap::*;
pub use plan_create::*;
pub use plan_manage::*;
pub use subscription_close::*;
pub use subscription_collect::*;
pub use subscription_create::*;
pub use subscription_status::*;

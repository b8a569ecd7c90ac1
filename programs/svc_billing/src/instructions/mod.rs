//! One file per instruction, named after it.
pub mod cancel;
pub mod close_plan;
pub mod close_subscription;
pub mod collect;
pub mod create_plan;
pub mod deduct_allowance;
pub mod deprecate_plan;
pub mod pause;
pub mod resume;
pub mod set_allowance_cap;
pub mod subscribe;
pub mod update_plan;

pub use close_plan::*;
pub use close_subscription::*;
pub use collect::*;
pub use create_plan::*;
pub use deduct_allowance::*;
pub use pause::*;
pub use set_allowance_cap::*;
pub use subscribe::*;
pub use update_plan::*;

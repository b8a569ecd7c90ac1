pub mod allowance;
pub mod plan;
pub mod subscription;

pub use allowance::*;
pub use plan::*;
pub use subscription::*;

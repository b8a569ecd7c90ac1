pub mod allowance;
pub mod plan;
pub mod session;
pub mod subscription;

pub use allowance::*;
pub use plan::*;
pub use session::*;
pub use subscription::*;

//! Pure decision logic: functions over data that return data. Actors call these and carry out
//! the result; nothing here does I/O.

pub mod interruption;

//! The pool actuator against a fake ARM.

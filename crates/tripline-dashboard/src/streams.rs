//! Who may hold event streams open, and how many.
//!
//! Streams are long-lived: without limits, anyone who may read could hold every stream open
//! and leave the operator's page without live events. So capacity is shared out:
//! * at most `total` streams in all;
//! * the last `control_reserve` of them only for principals that may control;
//! * at most `per_principal` for one principal (by name);
//! * callers without credentials at most `anonymous` in all, and `per_client` from one
//!   address.
//!
//! The counts sit under one mutex that guards nothing else; nothing runs under it but the
//! counting.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

use crate::{Permissions, Principal};

/// The limits (see the module docs).
#[derive(Clone, Copy, Debug)]
pub(crate) struct StreamLimits {
    pub(crate) total: usize,
    pub(crate) control_reserve: usize,
    pub(crate) per_principal: usize,
    pub(crate) anonymous: usize,
    pub(crate) per_client: usize,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Owner {
    Principal(Arc<str>),
    Address(IpAddr),
}

#[derive(Debug, Default)]
struct Counts {
    total: usize,
    anonymous: usize,
    by_owner: HashMap<Owner, usize>,
}

/// The streams open now.
#[derive(Debug, Default)]
pub(crate) struct Streams {
    counts: Arc<Mutex<Counts>>,
}

/// An open stream's place; given back when dropped.
#[derive(Debug)]
pub(crate) struct Ticket {
    counts: Arc<Mutex<Counts>>,
    owner: Option<Owner>,
    anonymous: bool,
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut c = lock(&self.counts);
        c.total -= 1;
        if self.anonymous {
            c.anonymous -= 1;
        }
        if let Some(owner) = &self.owner {
            if let Some(n) = c.by_owner.get_mut(owner) {
                *n -= 1;
                if *n == 0 {
                    c.by_owner.remove(owner);
                }
            }
        }
    }
}

impl Streams {
    /// A place for a stream of `p` from `address`, or why not.
    pub(crate) fn admit(
        &self,
        limits: &StreamLimits,
        p: &Principal,
        address: Option<IpAddr>,
    ) -> Result<Ticket, String> {
        let anonymous = p.is_anonymous();
        let owner = if anonymous {
            address.map(Owner::Address)
        } else {
            Some(Owner::Principal(p.name().into()))
        };
        let mut c = lock(&self.counts);
        let may_control = !anonymous && p.may(Permissions::CONTROL);
        let room = if may_control {
            limits.total
        } else {
            limits.total - limits.control_reserve
        };
        if c.total >= room {
            return Err(if c.total >= limits.total {
                format!("{} event streams are open, the most allowed", limits.total)
            } else {
                format!(
                    "{} event streams are open; the last {} are kept for principals that may \
                     control",
                    c.total, limits.control_reserve
                )
            });
        }
        if anonymous && c.anonymous >= limits.anonymous {
            return Err(format!(
                "{} event streams without credentials are open, the most allowed: sign in with \
                 a token to follow the events",
                c.anonymous
            ));
        }
        let (cap, whose) = if anonymous {
            (limits.per_client, "this address")
        } else {
            (limits.per_principal, "this principal")
        };
        if let Some(owner) = &owner {
            let held = c.by_owner.get(owner).copied().unwrap_or(0);
            if held >= cap {
                return Err(format!(
                    "{held} event streams are open for {whose}, the most allowed: close a page \
                     that follows the events"
                ));
            }
        }
        c.total += 1;
        if anonymous {
            c.anonymous += 1;
        }
        if let Some(owner) = &owner {
            *c.by_owner.entry(owner.clone()).or_insert(0) += 1;
        }
        Ok(Ticket {
            counts: self.counts.clone(),
            owner,
            anonymous,
        })
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

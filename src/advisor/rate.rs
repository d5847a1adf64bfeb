//! Rates from counter deltas, as koordlet computes them: CPU cores = Δcpu ns ÷ Δwall
//! ns, throttled ratio = Δnr_throttled ÷ Δnr_periods. The first reading of an ID gives
//! no rate; previous readings are kept per ID and dropped for IDs not seen in a round.

use std::collections::HashMap;
use std::time::SystemTime;

use crate::contracts::CpuReading;

/// IDs tracked at most (pods, containers and system cgroups); past it a new ID gets
/// no rate until others go.
pub(crate) const MAX_TRACKED: usize = 16_384;

#[derive(Debug, Clone, Copy)]
struct Prev {
    at: SystemTime,
    cpu: CpuReading,
    /// The round it was last updated in.
    round: u64,
}

/// What a reading's deltas give.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct Rates {
    /// Cores used since the previous reading.
    pub cores: Option<f64>,
    /// Throttled periods ÷ periods since the previous reading (no periods → 0).
    pub throttled_ratio: Option<f64>,
}

/// The previous reading per ID. An ID's entry is updated in place each round (no
/// allocation for IDs already known: the advisor updates ~220 a second at 110 pods).
#[derive(Debug, Default)]
pub(crate) struct RateTracker {
    prev: HashMap<String, Prev>,
    round: u64,
}

impl RateTracker {
    /// Records `cpu` read at `at` for `id`, fills its `usage_nano_cores` and returns
    /// the rates. A counter that went backwards (a new cgroup with a reused ID) or a
    /// clock that did gives no rate.
    pub(crate) fn update(&mut self, id: &str, at: SystemTime, cpu: &mut CpuReading) -> Rates {
        let mut rates = Rates::default();
        if let Some(prev) = self.prev.get(id)
            && let Ok(wall) = at.duration_since(prev.at)
            && wall.as_nanos() > 0
            && cpu.usage_core_nanos >= prev.cpu.usage_core_nanos
        {
            let used = (cpu.usage_core_nanos - prev.cpu.usage_core_nanos) as f64;
            let wall_ns = wall.as_nanos() as f64;
            let cores = used / wall_ns;
            rates.cores = Some(cores);
            #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
            {
                cpu.usage_nano_cores = Some((cores * 1e9).round() as u64);
            }
            if let (Some(now), Some(before)) = (cpu.throttling, prev.cpu.throttling)
                && now.periods >= before.periods
                && now.throttled_periods >= before.throttled_periods
            {
                let periods = now.periods - before.periods;
                let throttled = now.throttled_periods - before.throttled_periods;
                rates.throttled_ratio = Some(if periods == 0 {
                    0.0
                } else {
                    throttled as f64 / periods as f64
                });
            }
        }
        let now = Prev {
            at,
            cpu: *cpu,
            round: self.round,
        };
        let room = self.prev.len() < MAX_TRACKED;
        match self.prev.get_mut(id) {
            Some(p) => *p = now,
            None if room => {
                self.prev.insert(id.to_string(), now);
            }
            None => {}
        }
        rates
    }

    /// Ends a round: forgets the IDs not updated in it (gone pods and containers).
    pub(crate) fn end_round(&mut self) {
        let round = self.round;
        self.prev.retain(|_, p| p.round == round);
        self.round += 1;
    }

    #[cfg(test)]
    pub(crate) fn tracked(&self) -> usize {
        self.prev.len()
    }
}

//! Statistics: adding a sample to one CPU's slots and combining every
//! CPU's slots into the extracted values, with stap's integer arithmetic.
//!
//! A statistic's per-CPU state is the `i64` slot vector of
//! [`StatLayout`], the same on both sides: host-only statistics keep one
//! vector (one "CPU"), kernel-shared ones are read from the per-CPU map.
//!
//! Variance is stap's: each CPU runs Welford's algorithm on values scaled
//! by `2^shift` with truncating integer division, keeping the running mean
//! `avg_s` and `m2`; reading combines CPUs with the total-variance formula
//! `(Σ count·(avg_s − avg)² + Σ (count − 1)·var_s) / (count − 1)` and
//! unscales by `2^(2·shift)`. So `x <<< 1..5` gives `@variance(x)` 12 and,
//! with shift 1, 2.

use stap_lang::bpf::layout::{self, HIST_LOG_BUCKETS, StatLayout};
use stap_lang::ir::{LinearHist, StatValue};

use super::error::RuntimeError;

/// A statistic's layout and its variance scaling.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StatShape {
    pub layout: StatLayout,
    pub shift: u32,
}

impl StatShape {
    pub fn empty(&self) -> Vec<i64> {
        vec![0; self.layout.slots as usize]
    }

    /// `s <<< value` on one CPU's slots.
    pub fn add(&self, slots: &mut [i64], value: i64) {
        let l = &self.layout;
        let count = slots[l.count as usize].wrapping_add(1);
        slots[l.count as usize] = count;
        slots[l.sum as usize] = slots[l.sum as usize].wrapping_add(value);
        if let Some(at) = l.min_max {
            let (min, max) = (at as usize, at as usize + 1);
            if count == 1 || value < slots[min] {
                slots[min] = value;
            }
            if count == 1 || value > slots[max] {
                slots[max] = value;
            }
        }
        if let Some(at) = l.variance {
            let (avg_s, m2) = (at as usize, at as usize + 1);
            let scaled = value.wrapping_shl(self.shift);
            if count == 1 {
                slots[avg_s] = scaled;
                slots[m2] = 0;
            } else {
                let delta = scaled.wrapping_sub(slots[avg_s]);
                slots[avg_s] = slots[avg_s].wrapping_add(delta / count);
                slots[m2] =
                    slots[m2].wrapping_add(delta.wrapping_mul(scaled.wrapping_sub(slots[avg_s])));
            }
        }
        if let Some(at) = l.hist_log {
            slots[(at + layout::hist_log_bucket(value)) as usize] += 1;
        }
        if let Some((at, h)) = l.hist_linear {
            slots[(at + layout::hist_linear_slot(&h, value)) as usize] += 1;
        }
    }

    /// Combines the slots of every CPU.
    pub fn aggregate<'a>(&self, cpus: impl IntoIterator<Item = &'a [i64]>) -> Aggregate {
        let l = &self.layout;
        let mut agg = Aggregate {
            count: 0,
            sum: 0,
            min: 0,
            max: 0,
            has_extremes: l.min_max.is_some(),
            variance: 0,
            hist_log: l.hist_log.map(|_| vec![0; HIST_LOG_BUCKETS as usize]),
            hist_linear: l
                .hist_linear
                .map(|(_, h)| (h, vec![0; layout::linear_buckets(&h) as usize + 2])),
        };
        // (count, avg_s, var_s) of each CPU with samples, for the variance.
        let mut parts = Vec::new();
        for slots in cpus {
            let count = slots[l.count as usize];
            if count <= 0 {
                continue;
            }
            if let Some(at) = l.min_max {
                let (min, max) = (slots[at as usize], slots[at as usize + 1]);
                if agg.count == 0 || min < agg.min {
                    agg.min = min;
                }
                if agg.count == 0 || max > agg.max {
                    agg.max = max;
                }
            }
            agg.count += count;
            agg.sum = agg.sum.wrapping_add(slots[l.sum as usize]);
            if let Some(at) = l.variance {
                let m2 = slots[at as usize + 1];
                let var_s = if count >= 2 { m2 / (count - 1) } else { 0 };
                parts.push((count, slots[at as usize], var_s));
            }
            if let (Some(at), Some(buckets)) = (l.hist_log, agg.hist_log.as_mut()) {
                let at = at as usize;
                for (b, s) in buckets.iter_mut().zip(&slots[at..]) {
                    *b += s;
                }
            }
            if let (Some((at, _)), Some((_, buckets))) = (l.hist_linear, agg.hist_linear.as_mut()) {
                let at = at as usize;
                for (b, s) in buckets.iter_mut().zip(&slots[at..]) {
                    *b += s;
                }
            }
        }
        if agg.count > 0 {
            let avg_s = agg.sum.wrapping_shl(self.shift) / agg.count;
            let (mut s1, mut s2) = (0i64, 0i64);
            for (count, cpu_avg_s, var_s) in parts {
                let d = cpu_avg_s.wrapping_sub(avg_s);
                s1 = s1.wrapping_add(count.wrapping_mul(d).wrapping_mul(d));
                s2 = s2.wrapping_add((count - 1).wrapping_mul(var_s));
            }
            let variance_s = if agg.count > 1 {
                s1.wrapping_add(s2) / (agg.count - 1)
            } else {
                0
            };
            agg.variance = variance_s >> (2 * self.shift).min(63);
        }
        agg
    }
}

/// A statistic combined over all CPUs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Aggregate {
    pub count: i64,
    pub sum: i64,
    /// Meaningful only when `has_extremes` (the layout keeps them).
    pub min: i64,
    pub max: i64,
    pub has_extremes: bool,
    pub variance: i64,
    pub hist_log: Option<Vec<i64>>,
    /// The layout and the slots: underflow, in-range buckets, overflow.
    pub hist_linear: Option<(LinearHist, Vec<i64>)>,
}

impl Aggregate {
    /// `@count(s)` etc. Everything but count and sum needs a sample.
    pub fn get(&self, what: StatValue) -> Result<i64, RuntimeError> {
        if self.count == 0 && !matches!(what, StatValue::Count | StatValue::Sum) {
            return Err(RuntimeError::EmptyAggregate);
        }
        Ok(match what {
            StatValue::Count => self.count,
            StatValue::Sum => self.sum,
            StatValue::Min => self.min,
            StatValue::Max => self.max,
            StatValue::Avg => self.sum / self.count,
            StatValue::Variance { .. } => self.variance,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use stap_lang::ir::StatNeeds;

    fn shape(shift: u32) -> StatShape {
        StatShape {
            layout: StatLayout::new(&StatNeeds {
                min_max: true,
                variance: true,
                ..StatNeeds::default()
            }),
            shift,
        }
    }

    #[test]
    fn variance_matches_stap_integer_arithmetic() {
        for (shift, expected) in [(0, 12), (1, 2)] {
            let shape = shape(shift);
            let mut slots = shape.empty();
            for v in 1..=5 {
                shape.add(&mut slots, v);
            }
            let agg = shape.aggregate([slots.as_slice()]);
            assert_eq!(
                agg.get(StatValue::Variance { shift }),
                Ok(expected),
                "shift {shift}"
            );
            assert_eq!(agg.get(StatValue::Avg), Ok(3));
            assert_eq!((agg.min, agg.max, agg.count, agg.sum), (1, 5, 5, 15));
        }
    }

    #[test]
    fn cpus_combine() {
        let shape = shape(0);
        let (mut a, mut b) = (shape.empty(), shape.empty());
        for v in [10, -4] {
            shape.add(&mut a, v);
        }
        shape.add(&mut b, 7);
        let agg = shape.aggregate([a.as_slice(), b.as_slice(), shape.empty().as_slice()]);
        assert_eq!((agg.count, agg.sum, agg.min, agg.max), (3, 13, -4, 10));
        assert_eq!(agg.get(StatValue::Avg), Ok(4));
    }

    #[test]
    fn empty_statistics_fail_except_count_and_sum() {
        let shape = shape(0);
        let agg = shape.aggregate([shape.empty().as_slice()]);
        assert_eq!(agg.get(StatValue::Count), Ok(0));
        assert_eq!(agg.get(StatValue::Sum), Ok(0));
        assert_eq!(agg.get(StatValue::Min), Err(RuntimeError::EmptyAggregate));
        assert_eq!(agg.get(StatValue::Avg), Err(RuntimeError::EmptyAggregate));
    }
}

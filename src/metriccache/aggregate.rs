//! Aggregations over a query's points, as koordlet's `AggregateResult` offers them:
//! avg, last, count and nearest-rank percentiles (sorted ascending, element
//! `int(n·p) − 1`, clamped to 0; no interpolation).

/// An aggregation koordlet's queries ask for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Aggregation {
    Avg,
    P50,
    P90,
    P95,
    P99,
    /// The point with the greatest timestamp.
    Last,
    Count,
}

impl Aggregation {
    fn percentile(self) -> Option<f64> {
        match self {
            Aggregation::P50 => Some(0.5),
            Aggregation::P90 => Some(0.9),
            Aggregation::P95 => Some(0.95),
            Aggregation::P99 => Some(0.99),
            _ => None,
        }
    }
}

/// Why an aggregation has no value.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub(crate) enum AggregateError {
    #[error("no points in the window")]
    Empty,
}

/// Which of a query's bounds stopped it before the end of its window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cut {
    /// It read as many points as it may.
    Points,
    /// Its time ran out.
    Deadline,
}

impl Cut {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Cut::Points => "points",
            Cut::Deadline => "deadline",
        }
    }
}

/// Every point a query matched, from all its series, in one list.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct AggregateResult {
    /// `(unix ms, value)`, in no particular order across series.
    points: Vec<(i64, f64)>,
    /// The query stopped at one of its bounds: the window held more.
    cut: Option<Cut>,
}

impl AggregateResult {
    pub(crate) fn new(points: Vec<(i64, f64)>) -> AggregateResult {
        AggregateResult { points, cut: None }
    }

    /// Marks the result as cut by one of the query's bounds.
    pub(crate) fn cut_short(mut self, cut: Option<Cut>) -> AggregateResult {
        self.cut = cut;
        self
    }

    pub(crate) fn truncated(&self) -> bool {
        self.cut.is_some()
    }

    /// The bound that cut the result short, if one did.
    pub(crate) fn cut(&self) -> Option<Cut> {
        self.cut
    }

    #[cfg(test)]
    pub(crate) fn sort_by_time(&mut self) {
        self.points.sort_by_key(|p| p.0);
    }

    #[cfg(test)]
    pub(crate) fn points(&self) -> &[(i64, f64)] {
        &self.points
    }

    pub(crate) fn count(&self) -> usize {
        self.points.len()
    }

    /// The newest timestamp minus the oldest, in ms (0 with fewer than two points).
    pub(crate) fn time_range_ms(&self) -> i64 {
        let min = self.points.iter().map(|(t, _)| *t).min();
        let max = self.points.iter().map(|(t, _)| *t).max();
        match (min, max) {
            (Some(a), Some(b)) => b - a,
            _ => 0,
        }
    }

    /// The aggregation's value. `Count` of nothing is 0; anything else of nothing is
    /// an error, as in koordlet.
    pub(crate) fn value(&self, agg: Aggregation) -> Result<f64, AggregateError> {
        if agg == Aggregation::Count {
            return Ok(self.points.len() as f64);
        }
        if self.points.is_empty() {
            return Err(AggregateError::Empty);
        }
        if let Some(p) = agg.percentile() {
            let mut values: Vec<f64> = self.points.iter().map(|(_, v)| *v).collect();
            values.sort_by(f64::total_cmp);
            let rank = ((values.len() as f64 * p) as usize).saturating_sub(1);
            return Ok(values[rank.min(values.len() - 1)]);
        }
        Ok(match agg {
            Aggregation::Last => self
                .points
                .iter()
                .max_by_key(|(t, _)| *t)
                .map_or(0.0, |(_, v)| *v),
            _ => self.points.iter().map(|(_, v)| *v).sum::<f64>() / self.points.len() as f64,
        })
    }
}

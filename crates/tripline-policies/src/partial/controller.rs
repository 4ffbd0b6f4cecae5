//! The controller: Semian's PID on the excess error rate, and its estimate of the ideal error
//! rate. Pure arithmetic: one [`Controller::update`] per interval, given the interval's error
//! rate.

use super::PartialConfig;

/// Semian's `SimpleExponentialSmoother`: the ideal error rate, learned from observations at
/// or below a cap, converging down quickly and up slowly, and more slowly still after 30
/// minutes of observations.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Smoother {
    value: f64,
    cap: f64,
    count: u64,
    low_confidence_observations: u64,
}

impl Smoother {
    const LOW_CONFIDENCE_ALPHA_UP: f64 = 0.0017;
    const LOW_CONFIDENCE_ALPHA_DOWN: f64 = 0.078;
    const HIGH_CONFIDENCE_ALPHA_UP: f64 = 0.0009;
    const HIGH_CONFIDENCE_ALPHA_DOWN: f64 = 0.039;

    pub(crate) fn new(initial: f64, cap: f64, interval_secs: f64) -> Self {
        // 30 minutes of observations, one per interval.
        let low = (1800.0 / interval_secs).round().max(1.0) as u64;
        Self {
            value: initial,
            cap,
            count: 0,
            low_confidence_observations: low,
        }
    }

    pub(crate) fn add(&mut self, v: f64) {
        if v > self.cap {
            return;
        }
        self.count += 1;
        let low = self.count < self.low_confidence_observations;
        let up = v > self.value;
        let alpha = match (low, up) {
            (true, true) => Self::LOW_CONFIDENCE_ALPHA_UP,
            (true, false) => Self::LOW_CONFIDENCE_ALPHA_DOWN,
            (false, true) => Self::HIGH_CONFIDENCE_ALPHA_UP,
            (false, false) => Self::HIGH_CONFIDENCE_ALPHA_DOWN,
        };
        self.value = alpha * v + (1.0 - alpha) * self.value;
    }

    pub(crate) fn value(&self) -> f64 {
        self.value
    }
}

/// The PID state.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Controller {
    kp: f64,
    ki: f64,
    kd: f64,
    upper: f64,
    lower: f64,
    dead_zone_ratio: f64,
    dt: f64,
    pub(crate) rejection_rate: f64,
    pub(crate) integral: f64,
    pub(crate) derivative: f64,
    pub(crate) p: f64,
    previous_p: f64,
    pub(crate) error_rate: f64,
    pub(crate) ideal: Smoother,
}

impl Controller {
    pub(crate) fn new(c: &PartialConfig) -> Self {
        let dt = c.interval.as_secs_f64();
        Self {
            kp: c.kp,
            ki: c.ki,
            kd: c.kd,
            upper: c.integral_upper_cap,
            lower: c.integral_lower_cap,
            dead_zone_ratio: c.dead_zone_ratio,
            dt,
            rejection_rate: 0.0,
            integral: 0.0,
            derivative: 0.0,
            p: 0.0,
            previous_p: 0.0,
            error_rate: 0.0,
            ideal: Smoother::new(c.initial_error_rate, c.ideal_error_rate_cap, dt),
        }
    }

    /// `P = Δ − (1 − Δ) × rejection_rate`, where `Δ` is the error rate above the ideal, with
    /// deviations within the dead zone (`ideal × dead_zone_ratio`) taken as zero.
    fn p_value(&self, error_rate: f64) -> f64 {
        let ideal = self.ideal.value();
        let raw = error_rate - ideal;
        let delta = if raw > 0.0 && raw <= ideal * self.dead_zone_ratio {
            0.0
        } else {
            raw
        };
        delta - (1.0 - delta) * self.rejection_rate
    }

    /// One interval, with the error rate over the window (`None`: no call in the window, read
    /// as no errors and not fed to the ideal estimate). Returns the new rejection rate.
    pub(crate) fn update(&mut self, error_rate: Option<f64>) -> f64 {
        self.previous_p = self.p;
        let e = error_rate.unwrap_or(0.0);
        self.error_rate = e;
        if let Some(e) = error_rate {
            self.ideal.add(e);
        }
        self.p = self.p_value(e);
        self.integral += self.p * self.dt;
        self.derivative = self.kd * (self.p - self.previous_p) / self.dt;
        let control = self.kp * self.p + self.ki * self.integral + self.derivative;
        self.rejection_rate = (self.rejection_rate + control).clamp(0.0, 1.0);
        self.integral = self.integral.clamp(self.lower, self.upper);
        self.rejection_rate
    }

    /// Applies `n` updates with no call in the window at once, for a controller that is not at
    /// rest (gains that settle very slowly). With no call the excess `Δ = −ideal` is constant,
    /// and while no cap binds one update is an affine map of (rejection rate, integral,
    /// previous P): it is raised to the `n`-th power by squaring, and the caps are applied to
    /// the result. Equal to `n` calls of [`update`](Self::update)`(None)` within
    /// floating-point rounding while the trajectory stays inside the caps (a controller that
    /// settles does so monotonically, so a cap it reaches it keeps).
    pub(crate) fn jump(&mut self, n: u64) {
        if n == 0 {
            return;
        }
        let ideal = self.ideal.value();
        let raw = -ideal;
        let d = if raw > 0.0 && raw <= ideal * self.dead_zone_ratio {
            0.0
        } else {
            raw
        };
        let (kp, ki, kd, dt) = (self.kp, self.ki, self.kd, self.dt);
        // State (R, I, P_prev, 1). P = d − (1 − d) R.
        let pr = -(1.0 - d);
        // I' = I + dt P
        let i_row = [dt * pr, 1.0, 0.0, dt * d];
        // D = kd (P − P_prev) / dt; R' = R + kp P + ki I' + D
        let r_row = [
            1.0 + kp * pr + ki * i_row[0] + kd * pr / dt,
            ki,
            -kd / dt,
            kp * d + ki * i_row[3] + kd * d / dt,
        ];
        let p_row = [pr, 0.0, 0.0, d];
        let step: Mat = [r_row, i_row, p_row, [0.0, 0.0, 0.0, 1.0]];
        let m = mat_pow(step, n);
        let v = [self.rejection_rate, self.integral, self.p, 1.0];
        let apply = |row: [f64; 4]| row.iter().zip(v).map(|(a, b)| a * b).sum::<f64>();
        let (r, i, p) = (apply(m[0]), apply(m[1]), apply(m[2]));
        self.previous_p = p;
        self.p = p;
        self.error_rate = 0.0;
        self.derivative = 0.0;
        self.integral = if i.is_finite() {
            i.clamp(self.lower, self.upper)
        } else {
            self.lower
        };
        self.rejection_rate = if r.is_finite() {
            r.clamp(0.0, 1.0)
        } else {
            0.0
        };
    }

    /// Whether `n` more updates with no call in the window leave the rejection rate at zero
    /// and change nothing but the integral (which they lower by `ideal × dt` each, to its
    /// lower cap): then they can be applied at once by [`rest`](Self::rest).
    pub(crate) fn at_rest(&self) -> bool {
        let p = self.p_value(0.0);
        self.rejection_rate == 0.0
            && p == self.p
            && p <= 0.0
            && self.kp * p + self.ki * (self.integral + p * self.dt) <= 0.0
    }

    /// Applies `n` updates with no call in the window to a controller [`at_rest`](Self::at_rest):
    /// step by step (the same arithmetic as [`update`](Self::update)) until the integral
    /// reaches its lower cap, where it stays, or for at most `EXACT_STEPS`; any steps beyond
    /// those at once.
    pub(crate) fn rest(&mut self, n: u64) {
        const EXACT_STEPS: u64 = 100_000;
        if n == 0 {
            return;
        }
        self.previous_p = self.p;
        self.derivative = 0.0;
        self.error_rate = 0.0;
        let step = self.p * self.dt;
        for _ in 0..n.min(EXACT_STEPS) {
            if step == 0.0 || self.integral == self.lower {
                return;
            }
            self.integral = (self.integral + step).clamp(self.lower, self.upper);
        }
        if n > EXACT_STEPS {
            let left = (n - EXACT_STEPS) as f64;
            self.integral = (self.integral + step * left).clamp(self.lower, self.upper);
        }
    }
}

type Mat = [[f64; 4]; 4];

fn mat_mul(a: &Mat, b: &Mat) -> Mat {
    let mut c = [[0.0; 4]; 4];
    for (i, row) in c.iter_mut().enumerate() {
        for (j, x) in row.iter_mut().enumerate() {
            *x = (0..4).map(|k| a[i][k] * b[k][j]).sum();
        }
    }
    c
}

fn mat_pow(mut m: Mat, mut n: u64) -> Mat {
    let mut out: Mat = [
        [1.0, 0.0, 0.0, 0.0],
        [0.0, 1.0, 0.0, 0.0],
        [0.0, 0.0, 1.0, 0.0],
        [0.0, 0.0, 0.0, 1.0],
    ];
    while n > 0 {
        if n & 1 == 1 {
            out = mat_mul(&out, &m);
        }
        m = mat_mul(&m, &m);
        n >>= 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn controller() -> Controller {
        Controller::new(&PartialConfig::default())
    }

    #[test]
    fn a_constant_error_rate_converges_to_the_share_that_zeroes_p() {
        let mut c = controller();
        for _ in 0..200 {
            c.update(Some(0.20));
        }
        // Δ = 0.20 − 0.05, and P = 0 at r = Δ / (1 − Δ).
        let expected = 0.15 / 0.85;
        assert!(
            (c.rejection_rate - expected).abs() < 1e-9,
            "{}",
            c.rejection_rate
        );
        assert!(c.p.abs() < 1e-9);
    }

    #[test]
    fn the_dead_zone_ignores_small_excesses() {
        let mut c = controller();
        for _ in 0..100 {
            c.update(Some(0.06)); // 0.01 above ideal, within 0.05 × 0.25
        }
        assert_eq!(c.rejection_rate, 0.0);
    }

    #[test]
    fn the_smoother_ignores_observations_above_its_cap_and_converges_down_fast() {
        let mut s = Smoother::new(0.05, 0.1, 1.0);
        s.add(0.5);
        assert_eq!(s.value(), 0.05);
        for _ in 0..300 {
            s.add(0.0);
        }
        assert!(s.value() < 0.001);
    }

    #[test]
    fn rest_equals_the_updates_it_replaces() {
        let mut a = controller();
        for _ in 0..30 {
            a.update(Some(1.0));
        }
        while !a.at_rest() {
            a.update(None);
        }
        let mut b = a;
        for _ in 0..1000 {
            a.update(None);
        }
        b.rest(1000);
        assert_eq!(a.rejection_rate, b.rejection_rate);
        assert_eq!(a.integral, b.integral);
        assert_eq!(a.p, b.p);
    }

    #[test]
    fn a_jump_equals_the_updates_it_replaces_within_rounding() {
        for ki in [0.00001, 0.001, 0.2] {
            let c = PartialConfig::builder()
                .ki(ki)
                .initial_error_rate(0.0)
                .build()
                .unwrap();
            let mut a = Controller::new(&c);
            for _ in 0..60 {
                a.update(Some(1.0));
            }
            for _ in 0..20 {
                a.update(None);
            }
            let mut b = a;
            for _ in 0..200_000 {
                a.update(None);
            }
            b.jump(200_000);
            let close = |x: f64, y: f64| (x - y).abs() <= 1e-9 * x.abs().max(y.abs()) + 1e-15;
            assert!(
                close(a.rejection_rate, b.rejection_rate),
                "{ki}: {a:?} {b:?}"
            );
            assert!(close(a.integral, b.integral), "{ki}: {a:?} {b:?}");
        }
    }
}

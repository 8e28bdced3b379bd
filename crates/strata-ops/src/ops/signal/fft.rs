//! Discrete Fourier transforms of any length in f64: an iterative radix-2 FFT for powers of two
//! and Bluestein's chirp-z algorithm (power-of-two FFTs of a padded length) for every other
//! length. The Bluestein tables depend on the length only, so an [`Fft`] computes them once into
//! caller-provided working memory ([`Fft::work_len`]) and reuses them for every transform.

use std::f64::consts::PI;

/// A complex number (two f64s, so planned scratch can hold them).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Default, bytemuck::Pod, bytemuck::Zeroable)]
pub(crate) struct Complex {
    pub re: f64,
    pub im: f64,
}

impl Complex {
    pub(crate) const ZERO: Complex = Complex { re: 0.0, im: 0.0 };

    pub(crate) fn new(re: f64, im: f64) -> Complex {
        Complex { re, im }
    }

    /// `e^{i angle}`.
    fn unit(angle: f64) -> Complex {
        Complex::new(angle.cos(), angle.sin())
    }

    fn mul(self, o: Complex) -> Complex {
        Complex::new(
            self.re * o.re - self.im * o.im,
            self.re * o.im + self.im * o.re,
        )
    }

    fn add(self, o: Complex) -> Complex {
        Complex::new(self.re + o.re, self.im + o.im)
    }

    fn sub(self, o: Complex) -> Complex {
        Complex::new(self.re - o.re, self.im - o.im)
    }

    pub(crate) fn conj(self) -> Complex {
        Complex::new(self.re, -self.im)
    }

    pub(crate) fn scale(self, s: f64) -> Complex {
        Complex::new(self.re * s, self.im * s)
    }
}

/// Transforms of one length and direction: the in-place unnormalized DFT
/// `X_k = Σ x_j e^{∓2πi jk/n}` (`-` forward, `+` with `inverse`).
pub(crate) struct Fft<'w> {
    n: usize,
    inverse: bool,
    /// Bluestein only (else empty): the chirp `e^{±πi k²/n}` ([n]), the FFT of the conjugate
    /// chirp's circular extension ([m]) and one padded buffer ([m]).
    chirp: &'w [Complex],
    chirp_spectrum: &'w [Complex],
    padded: &'w mut [Complex],
}

impl<'w> Fft<'w> {
    /// Complex values of working memory transforms of length `n` need (`None` on overflow).
    pub(crate) fn work_len(n: usize) -> Option<usize> {
        if n <= 1 || n.is_power_of_two() {
            return Some(0);
        }
        let m = bluestein_len(n)?;
        n.checked_add(m.checked_mul(2)?)
    }

    /// Prepares transforms of length `n` in `work` (at least [`Fft::work_len`] values).
    pub(crate) fn new(n: usize, inverse: bool, work: &'w mut [Complex]) -> Option<Fft<'w>> {
        let need = Fft::work_len(n)?;
        if work.len() < need {
            return None;
        }
        if need == 0 {
            return Some(Fft {
                n,
                inverse,
                chirp: &[],
                chirp_spectrum: &[],
                padded: &mut [],
            });
        }
        let m = bluestein_len(n)?;
        let (chirp, rest) = work[..need].split_at_mut(n);
        let (chirp_spectrum, padded) = rest.split_at_mut(m);
        let sign = if inverse { 1.0 } else { -1.0 };
        for (k, c) in chirp.iter_mut().enumerate() {
            // k² mod 2n keeps the angle small and exact for large k.
            let k2 = (k as u128 * k as u128 % (2 * n as u128)) as f64;
            *c = Complex::unit(sign * PI * k2 / n as f64);
        }
        chirp_spectrum.fill(Complex::ZERO);
        chirp_spectrum[0] = chirp[0].conj();
        for k in 1..n {
            chirp_spectrum[k] = chirp[k].conj();
            chirp_spectrum[m - k] = chirp[k].conj();
        }
        radix2(chirp_spectrum, false);
        Some(Fft {
            n,
            inverse,
            chirp,
            chirp_spectrum,
            padded,
        })
    }

    /// Transforms `data` (of the prepared length) in place.
    pub(crate) fn run(&mut self, data: &mut [Complex]) {
        debug_assert_eq!(data.len(), self.n);
        if self.n <= 1 {
            return;
        }
        if self.n.is_power_of_two() {
            radix2(data, self.inverse);
        } else {
            self.bluestein(data);
        }
    }

    /// Bluestein: with `jk = (j² + k² - (k-j)²) / 2` the DFT becomes a convolution with a
    /// chirp, computed by power-of-two FFTs of length `m >= 2n - 1`.
    fn bluestein(&mut self, data: &mut [Complex]) {
        let (n, m) = (self.n, self.padded.len());
        let a = &mut *self.padded;
        a.fill(Complex::ZERO);
        for k in 0..n {
            a[k] = data[k].mul(self.chirp[k]);
        }
        radix2(a, false);
        for (x, y) in a.iter_mut().zip(self.chirp_spectrum) {
            *x = x.mul(*y);
        }
        radix2(a, true);
        let scale = 1.0 / m as f64;
        for k in 0..n {
            data[k] = a[k].scale(scale).mul(self.chirp[k]);
        }
    }
}

/// The power-of-two length Bluestein pads a transform of length `n` to.
fn bluestein_len(n: usize) -> Option<usize> {
    n.checked_mul(2)?
        .checked_sub(1)?
        .checked_next_power_of_two()
}

fn radix2(data: &mut [Complex], inverse: bool) {
    let n = data.len();
    let bits = n.trailing_zeros();
    for i in 0..n {
        let j = i.reverse_bits() >> (usize::BITS - bits);
        if i < j {
            data.swap(i, j);
        }
    }
    let sign = if inverse { 1.0 } else { -1.0 };
    let mut len = 2;
    while len <= n {
        let step = Complex::unit(sign * 2.0 * PI / len as f64);
        for start in (0..n).step_by(len) {
            let mut w = Complex::new(1.0, 0.0);
            for k in 0..len / 2 {
                let a = data[start + k];
                let b = data[start + k + len / 2].mul(w);
                data[start + k] = a.add(b);
                data[start + k + len / 2] = a.sub(b);
                w = w.mul(step);
            }
        }
        len <<= 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Transforms `data` with freshly allocated working memory.
    fn fft(data: &mut [Complex], inverse: bool) {
        let mut work = vec![Complex::ZERO; Fft::work_len(data.len()).unwrap()];
        Fft::new(data.len(), inverse, &mut work).unwrap().run(data);
    }

    fn naive(x: &[Complex], inverse: bool) -> Vec<Complex> {
        let n = x.len();
        let sign = if inverse { 1.0 } else { -1.0 };
        (0..n)
            .map(|k| {
                x.iter().enumerate().fold(Complex::ZERO, |acc, (j, v)| {
                    let angle = sign * 2.0 * PI * ((j * k) % n) as f64 / n as f64;
                    acc.add(v.mul(Complex::unit(angle)))
                })
            })
            .collect()
    }

    #[test]
    fn matches_the_definition_for_every_length() {
        for n in [1usize, 2, 3, 5, 8, 10, 12, 16, 17] {
            let x: Vec<Complex> = (0..n)
                .map(|i| Complex::new((i as f64 * 0.7).sin(), (i as f64 * 1.3).cos()))
                .collect();
            for inverse in [false, true] {
                let mut y = x.clone();
                fft(&mut y, inverse);
                for (a, b) in y.iter().zip(naive(&x, inverse)) {
                    assert!(
                        (a.re - b.re).abs() < 1e-9 && (a.im - b.im).abs() < 1e-9,
                        "n = {n}: {a:?} vs {b:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn one_plan_serves_many_transforms_and_short_work_is_refused() {
        let n = 6;
        let mut work = vec![Complex::ZERO; Fft::work_len(n).unwrap()];
        assert!(Fft::new(n, false, &mut work[1..]).is_none());
        let mut plan = Fft::new(n, false, &mut work).unwrap();
        for shift in 0..3 {
            let x: Vec<Complex> = (0..n)
                .map(|i| Complex::new((i + shift) as f64, -(i as f64)))
                .collect();
            let mut y = x.clone();
            plan.run(&mut y);
            for (a, b) in y.iter().zip(naive(&x, false)) {
                assert!((a.re - b.re).abs() < 1e-9 && (a.im - b.im).abs() < 1e-9);
            }
        }
        assert_eq!(Fft::work_len(8), Some(0));
        assert_eq!(Fft::work_len(usize::MAX), None);
    }

    #[test]
    fn impulse_gives_flat_spectrum() {
        let mut x = vec![Complex::ZERO; 6];
        x[0] = Complex::new(2.0, 0.0);
        fft(&mut x, false);
        assert!(x
            .iter()
            .all(|c| (c.re - 2.0).abs() < 1e-12 && c.im.abs() < 1e-12));
    }
}

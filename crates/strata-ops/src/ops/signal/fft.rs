//! Discrete Fourier transforms of any length in f64: an iterative radix-2 FFT for powers of two
//! and Bluestein's chirp-z algorithm (three power-of-two FFTs) for every other length.

use std::f64::consts::PI;

/// A complex number.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
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

/// In-place unnormalized DFT: `X_k = Σ x_j e^{∓2πi jk/n}` (`-` forward, `+` with `inverse`).
pub(crate) fn fft(data: &mut [Complex], inverse: bool) {
    let n = data.len();
    if n <= 1 {
        return;
    }
    if n.is_power_of_two() {
        radix2(data, inverse);
    } else {
        bluestein(data, inverse);
    }
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

/// Bluestein: with `jk = (j² + k² - (k-j)²) / 2` the DFT becomes a convolution with a chirp,
/// computed by power-of-two FFTs of length `m >= 2n - 1`.
fn bluestein(data: &mut [Complex], inverse: bool) {
    let n = data.len();
    let m = (2 * n - 1).next_power_of_two();
    let sign = if inverse { 1.0 } else { -1.0 };
    // k² mod 2n keeps the angle small and exact for large k.
    let chirp: Vec<Complex> = (0..n)
        .map(|k| {
            let k2 = (k as u128 * k as u128 % (2 * n as u128)) as f64;
            Complex::unit(sign * PI * k2 / n as f64)
        })
        .collect();
    let mut a = vec![Complex::ZERO; m];
    for k in 0..n {
        a[k] = data[k].mul(chirp[k]);
    }
    let mut b = vec![Complex::ZERO; m];
    b[0] = chirp[0].conj();
    for k in 1..n {
        b[k] = chirp[k].conj();
        b[m - k] = chirp[k].conj();
    }
    radix2(&mut a, false);
    radix2(&mut b, false);
    for (x, y) in a.iter_mut().zip(&b) {
        *x = x.mul(*y);
    }
    radix2(&mut a, true);
    let scale = 1.0 / m as f64;
    for k in 0..n {
        data[k] = a[k].scale(scale).mul(chirp[k]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn impulse_gives_flat_spectrum() {
        let mut x = vec![Complex::ZERO; 6];
        x[0] = Complex::new(2.0, 0.0);
        fft(&mut x, false);
        assert!(x
            .iter()
            .all(|c| (c.re - 2.0).abs() < 1e-12 && c.im.abs() < 1e-12));
    }
}

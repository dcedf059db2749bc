/* Python's float semantics where C's differ, for bit-identical results with the Python
 * engine (agents/mrc, the specification). Header-only: static inline helpers.
 *
 * - max(a, b) keeps the first argument unless the second is strictly greater; min(a, b)
 *   unless the second is strictly smaller (CPython builtin min_max: `item > current`).
 *   That decides which of 0.0/-0.0 or a NaN comes out, where fmax/fmin differ.
 * - a // b on floats is CPython's float_floor_div (Objects/floatobject.c, _float_div_mod):
 *   fmod, then (a - mod) / b, sign fix-up, then floor snapped to the nearest integer.
 *   b must not be 0 (Python raises ZeroDivisionError; callers validate first).
 * - int -> float conversions (Python int in float arithmetic) are (double) casts: exact
 *   below 2**53, correctly rounded above, as PyLong_AsDouble. */
#ifndef MRCN_PYFLOAT_H
#define MRCN_PYFLOAT_H

#include <math.h>

static inline double mrcn_py_max(double a, double b)
{
    return b > a ? b : a;
}

static inline double mrcn_py_min(double a, double b)
{
    return b < a ? b : a;
}

static inline double mrcn_py_floordiv(double vx, double wx)
{
    double mod = fmod(vx, wx);
    double div = (vx - mod) / wx;
    double floordiv;
    if (mod != 0.0) {
        if ((wx < 0) != (mod < 0))
            div -= 1.0;
    }
    if (div != 0.0) {
        floordiv = floor(div);
        if (div - floordiv > 0.5)
            floordiv += 1.0;
    } else {
        floordiv = copysign(0.0, vx / wx);
    }
    return floordiv;
}

#endif

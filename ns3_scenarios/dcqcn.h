// DCQCN reaction point (RP) of one QP: a pure state machine (no ns-3 here) that roce_nic.h drives
// with the simulation clock, and the tests drive with hand-picked instants (closed forms).
//
// The algorithm is HPCC's Mellanox variant (rdma-hw.cc: cnp_received_mlx, UpdateAlphaMlx,
// CheckRateDecreaseMlx, RateIncEventTimerMlx / RateIncEventMlx), plus the byte counter that
// NVIDIA's ConnectX RP has and HPCC's does not (rpg_byte_reset; the original DCQCN ns-3 model's
// rpr_fast_byte / rpr_active_select, Zhu et al., SIGCOMM 2015):
//   first CNP      alpha = 1, target = rate; alpha ticks every alphaInterval from here, rate-decrease
//                  ticks every decreaseInterval from here + 1 ns;
//   alpha tick     alpha = (1 - g) alpha + g if a CNP arrived since the last tick, else (1 - g) alpha;
//   decrease tick  with a CNP since the last one: target = rate if an increase event happened since
//                  the last cut (clamp_tgt_rate_after_time_inc = 1: timer or byte events alike) or
//                  clampTarget; rate = max(minRate, rate (1 - alpha / 2)); both increase counters
//                  and the byte count restart, the RP timer restarts;
//   increase event every increaseInterval (timer, T counts them) and every byteReset bytes the QP
//                  sends (byte counter, B counts them), counted before this event:
//                    max(T, B) <  F  fast recovery    rate = (rate + target) / 2
//                    min(T, B) >  F  hyper increase   target += HAI, then the same average
//                    otherwise       additive         target += AI,  then the same average
//                  target capped at line rate. Without the byte counter B follows T, which is
//                  HPCC's single-counter rule (T < F, T == F, T > F) exactly.
// A QP whose rate and target are back at line rate needs no more events (nothing changes then).
//
// What persists: all of the above lives as long as the QP. With perMessage (HPCC's and SimAI's
// behaviour: every flow.txt line there is a new QP, rdma-hw.cc AddQueuePair sets m_rate and
// mlx.m_targetRate to the line rate, m_first_cnp true) it restarts at line rate when a message's
// first packet leaves, and a CNP sent for an earlier message of the QP is not heeded.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace tracegen
{

// Reaction point parameters (config.txt's DCQCN keys, manifest sim.dcqcn for the rest).
struct Dcqcn
{
    bool enabled = false;
    double g = 5.0 / 1024;                   // EWMA_GAIN (ConnectX dce_tcp_g 1019: 1 - 1019/1024)
    int64_t alphaIntervalPs = 1000000;       // ALPHA_RESUME_INTERVAL (dce_tcp_rtt 1 us)
    int64_t decreaseIntervalPs = 4000000;    // RATE_DECREASE_INTERVAL (rate_reduce_monitor_period)
    int64_t increaseIntervalPs = 300000000;  // RP_TIMER (rpg_time_reset 300 us)
    uint64_t byteReset = 32767;              // rpg_byte_reset; 0: no byte counter (HPCC)
    double aiBps = 5e6, haiBps = 50e6;       // RATE_AI, RATE_HAI (rpg_ai_rate, rpg_hai_rate)
    double minBps = 1e6;                     // MIN_RATE (rpg_min_rate)
    uint32_t fastRecoverySteps = 1;          // FAST_RECOVERY_TIMES (rpg_threshold)
    bool clampTarget = false;                // CLAMP_TARGET_RATE (clamp_tgt_rate)
    bool perMessage = false;                 // every message starts at line rate (HPCC, SimAI)
};

struct DcqcnRp
{
    double rateBps = 0, targetBps = 0, alpha = 1;
    bool cut = false;            // the first CNP has come: the state is in use
    bool alphaCnp = false, decreaseCnp = false;
    int64_t epochPs = 0;         // first CNP: alpha ticks at epoch + k A, decreases at + 1 ns + k D
    int64_t alphaDonePs = 0;     // alpha ticks applied up to here
    uint32_t timerEvents = 0, byteEvents = 0;   // T, B since the last cut
    uint64_t bytes = 0;          // sent since the last byte event or cut
    uint64_t cuts = 0;

    // A fresh QP (or, with perMessage, a fresh message): line rate, no CNP seen.
    void Reset(double lineBps)
    {
        *this = DcqcnRp();
        rateBps = targetBps = lineBps;
    }

    bool AtLine(double lineBps) const
    {
        return rateBps >= lineBps && targetBps >= lineBps;
    }

    // The alpha ticks due up to `now` (lazy: the same arithmetic as one event per tick).
    void AlphaUpTo(const Dcqcn& D, int64_t now)
    {
        int64_t due = (now - epochPs) / D.alphaIntervalPs;
        int64_t done = (alphaDonePs - epochPs) / D.alphaIntervalPs;
        if (due <= done)
        {
            return;
        }
        int64_t ticks = due - done;
        if (alphaCnp)
        {
            alpha = (1 - D.g) * alpha + D.g;
            alphaCnp = false;
            ticks--;
        }
        if (ticks > 0)
        {
            alpha *= std::pow(1 - D.g, double(ticks));
        }
        alphaDonePs = epochPs + due * D.alphaIntervalPs;
    }

    // A CNP arrives; returns when the decrease tick that acts on it falls.
    int64_t OnCnp(const Dcqcn& D, int64_t now)
    {
        if (!cut)
        {
            cut = true;
            alpha = 1;
            alphaCnp = false;
            epochPs = alphaDonePs = now;
            targetBps = rateBps;       // rate_to_set_on_first_cnp 0: the current rate
        }
        else
        {
            AlphaUpTo(D, now);
            alphaCnp = true;
        }
        decreaseCnp = true;
        int64_t base = epochPs + 1000, k = now < base ? 1 : (now - base) / D.decreaseIntervalPs + 1;
        return base + k * D.decreaseIntervalPs;
    }

    // A decrease tick; true when it cut the rate (the RP timer then restarts at now).
    bool Decrease(const Dcqcn& D, int64_t now)
    {
        AlphaUpTo(D, now);
        if (!decreaseCnp)
        {
            return false;
        }
        if (D.clampTarget || timerEvents + byteEvents > 0)
        {
            targetBps = rateBps;
        }
        rateBps = std::max(D.minBps, rateBps * (1 - alpha / 2));
        timerEvents = byteEvents = 0;
        bytes = 0;
        decreaseCnp = false;
        cuts++;
        return true;
    }

    // One rate-increase event (timer or byte counter).
    void Increase(const Dcqcn& D, double lineBps, bool byTimer)
    {
        uint32_t t = timerEvents, b = D.byteReset ? byteEvents : timerEvents;
        uint32_t F = D.fastRecoverySteps;
        if (std::max(t, b) >= F)
        {
            targetBps = std::min(lineBps, targetBps + (std::min(t, b) > F ? D.haiBps : D.aiBps));
        }
        rateBps = rateBps / 2 + targetBps / 2;
        (byTimer ? timerEvents : byteEvents)++;
        if (targetBps >= lineBps && lineBps - rateBps < lineBps * 1e-6)
        {
            rateBps = lineBps;         // recovered: from here nothing changes
        }
    }

    // `n` more bytes sent; true when they completed a byte-counter period (an increase event).
    bool OnSent(const Dcqcn& D, double lineBps, uint64_t n)
    {
        if (!cut || !D.byteReset || AtLine(lineBps))
        {
            return false;
        }
        bytes += n;
        if (bytes < D.byteReset)
        {
            return false;
        }
        bytes = 0;
        Increase(D, lineBps, false);
        return true;
    }
};

} // namespace tracegen

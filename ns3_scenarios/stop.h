// Stop the simulation on SIGINT / SIGTERM / SIGHUP. Python runs its signal handlers only between
// bytecodes, so while Simulator::Run() is in C++ they would wait for the whole run: during Run
// this handler notes the signal and a watcher event stops the simulation within a simulated
// microsecond; Disarm() puts Python's handlers back and says which signal came (0: none), and the
// caller raises it again for Python's handler.
#pragma once

#include "ns3/core-module.h"

#include <algorithm>
#include <csignal>

namespace tracegen
{

class StopOnSignal
{
  public:
    // Watch from `startPs` (the replay's t0: nothing runs before it) every `periodPs`.
    static void Arm(int64_t startPs, int64_t periodPs)
    {
        Caught() = 0;
        s_periodPs = periodPs;
        s_armed = true;
        for (int i = 0; i < 3; ++i)
        {
            struct sigaction sa = {};
            sa.sa_handler = &StopOnSignal::Handler;
            sigemptyset(&sa.sa_mask);
            sigaction(kSignals[i], &sa, &s_old[i]);
            if (s_old[i].sa_handler == SIG_IGN)
            { // ignored (nohup): stays ignored
                sigaction(kSignals[i], &s_old[i], nullptr);
            }
        }
        int64_t now = ns3::Simulator::Now().GetPicoSeconds();
        ns3::Simulator::Schedule(ns3::PicoSeconds(std::max(startPs - now, periodPs)), &StopOnSignal::Watch);
    }

    static int Disarm()
    {
        for (int i = 0; s_armed && i < 3; ++i)
        { // only what Arm saved: never a zeroed SIG_DFL over Python's handlers
            sigaction(kSignals[i], &s_old[i], nullptr);
        }
        s_armed = false;
        return Caught();
    }

  private:
    static volatile std::sig_atomic_t& Caught()
    {
        static volatile std::sig_atomic_t sig = 0;
        return sig;
    }

    static void Handler(int sig)
    {
        if (!Caught())
        {
            Caught() = sig;
        }
    }

    // Every period: stop on a signal; keep watching only while other events remain.
    static void Watch()
    {
        if (Caught())
        {
            ns3::Simulator::Stop();
        }
        else if (!ns3::Simulator::IsFinished())
        {
            ns3::Simulator::Schedule(ns3::PicoSeconds(s_periodPs), &StopOnSignal::Watch);
        }
    }

    static constexpr int kSignals[3] = {SIGINT, SIGTERM, SIGHUP};
    static inline struct sigaction s_old[3] = {};
    static inline int64_t s_periodPs = 1000000;
    static inline bool s_armed = false;
};

} // namespace tracegen

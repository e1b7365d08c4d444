# What the memory benchmarks (bench/images.exs, bench/isolation.exs) read
# from the OS: a process's resident set and the machine's load average.
# One copy, so that both report figures taken the same way.
defmodule Bench.Memory do
  @moduledoc false

  @doc "Resident set of OS process `os_pid`, in KB (VmRSS of /proc)."
  @spec rss_kb(non_neg_integer() | String.t()) :: non_neg_integer()
  def rss_kb(os_pid) do
    "/proc/#{os_pid}/status"
    |> File.read!()
    |> then(&Regex.run(~r/VmRSS:\s+(\d+)/, &1))
    |> then(fn [_, kb] -> String.to_integer(kb) end)
  end

  @doc "Proportional set of OS process `os_pid`, in KB (Pss of smaps_rollup)."
  @spec pss_kb(non_neg_integer() | String.t()) :: non_neg_integer()
  def pss_kb(os_pid) do
    "/proc/#{os_pid}/smaps_rollup"
    |> File.read!()
    |> then(&Regex.run(~r/^Pss:\s+(\d+)/m, &1))
    |> then(fn [_, kb] -> String.to_integer(kb) end)
  end

  @doc "Resident set of this VM, in KB."
  @spec vm_rss_kb() :: non_neg_integer()
  def vm_rss_kb, do: rss_kb(List.to_string(:os.getpid()))

  @doc "The 1, 5 and 15 minute load averages, as `uptime` shows them."
  @spec loadavg() :: String.t()
  def loadavg do
    case File.read("/proc/loadavg") do
      {:ok, text} -> text |> String.split() |> Enum.take(3) |> Enum.join(" ")
      _ -> "?"
    end
  end
end

defmodule Bench.Chart do
  @moduledoc false
  # Hand-written SVG charts (no plotting library is available): a horizontal
  # grouped bar chart on a log scale for latencies, and a grouped vertical
  # bar chart for throughput.

  @colors %{"raw" => "#4c78a8", "ours" => "#f58518", "bash" => "#54a24b"}
  @labels %{
    "raw" => "raw bashkit (Rust)",
    "ours" => "ExBashkit",
    "bash" => ~s|System.cmd("bash")|
  }

  @doc """
  `rows`: `[{label, [{impl, %{median:, p90:, p99:}}]}]`, impl in "raw",
  "ours", "bash". Medians as bars, p90–p99 as a whisker. Log scale.
  """
  def latency(rows, title) do
    rows = Enum.reject(rows, fn {_, bars} -> bars == [] end)
    values = for {_, bars} <- rows, {_, s} <- bars, v <- [s.median, s.p99], v > 0, do: v
    lo = decade_floor(Enum.min(values, fn -> 1_000 end))
    hi = decade_ceil(Enum.max(values, fn -> 1_000_000 end))

    left = 250
    plot_w = 560
    bar_h = 13
    gap = 12
    top = 60
    row_h = fn bars -> length(bars) * bar_h + gap end
    height = top + Enum.sum(Enum.map(rows, fn {_, b} -> row_h.(b) end)) + 50
    width = left + plot_w + 110

    x = fn v ->
      left +
        plot_w * (:math.log10(max(v, lo)) - :math.log10(lo)) / (:math.log10(hi) - :math.log10(lo))
    end

    grid =
      for d <- decades(lo, hi) do
        gx = x.(d)

        [
          line(gx, top - 8, gx, height - 40, "#ddd"),
          text(gx, height - 24, decade_label(d), anchor: "middle", size: 11, fill: "#555")
        ]
      end

    {bars_svg, _} =
      Enum.map_reduce(rows, top, fn {label, bars}, y0 ->
        label_y = y0 + length(bars) * bar_h / 2 + 4

        svg = [
          text(left - 8, label_y, label, anchor: "end", size: 12),
          for {{impl, s}, i} <- Enum.with_index(bars) do
            y = y0 + i * bar_h
            w = x.(s.median) - left

            [
              rect(left, y + 1, max(w, 1), bar_h - 2, @colors[impl]),
              line(x.(s.p90), y + bar_h / 2, x.(s.p99), y + bar_h / 2, "#222"),
              line(x.(s.p99), y + 3, x.(s.p99), y + bar_h - 3, "#222"),
              text(x.(max(s.median, s.p99)) + 4, y + bar_h - 3, Bench.Stats.fmt_ns(s.median),
                size: 10,
                fill: "#333"
              )
            ]
          end
        ]

        {svg, y0 + row_h.(bars)}
      end)

    svg(width, height, [
      text(width / 2, 22, title, anchor: "middle", size: 15, weight: "bold"),
      legend(left, 40, ["raw", "ours", "bash"]),
      text(left + plot_w + 100, 52, "bar: median; whisker: p90–p99",
        anchor: "end",
        size: 10,
        fill: "#555"
      ),
      grid,
      line(left, top - 8, left, height - 40, "#888"),
      bars_svg
    ])
  end

  @doc """
  `groups`: `[{label, [{impl, ops_per_s}]}]`. Linear scale, vertical bars.
  """
  def throughput(groups, title) do
    max_v =
      groups |> Enum.flat_map(fn {_, b} -> Enum.map(b, &elem(&1, 1)) end) |> Enum.max(fn -> 1 end)

    top_v = nice_ceil(max_v)
    left = 80
    top = 60
    plot_h = 260
    group_w = 110
    bar_w = 36
    width = left + group_w * length(groups) + 40
    height = top + plot_h + 60
    y = fn v -> top + plot_h - plot_h * v / top_v end

    ticks =
      for i <- 0..5 do
        v = top_v * i / 5
        gy = y.(v)

        [
          line(left, gy, width - 20, gy, "#ddd"),
          text(left - 6, gy + 4, Bench.Stats.fmt_int(v), anchor: "end", size: 11, fill: "#555")
        ]
      end

    bars =
      for {{label, bars}, gi} <- Enum.with_index(groups) do
        gx = left + gi * group_w + 15

        [
          text(gx + bar_w * length(bars) / 2, top + plot_h + 18, label, anchor: "middle", size: 12),
          for {{impl, v}, i} <- Enum.with_index(bars) do
            bx = gx + i * bar_w

            [
              rect(bx + 2, y.(v), bar_w - 4, top + plot_h - y.(v), @colors[impl]),
              text(bx + bar_w / 2, y.(v) - 4, short(v), anchor: "middle", size: 10, fill: "#333")
            ]
          end
        ]
      end

    svg(width, height, [
      text(width / 2, 22, title, anchor: "middle", size: 15, weight: "bold"),
      legend(left, 40, ["raw", "ours"]),
      ticks,
      text(left, top + plot_h + 40, "concurrent sessions (\"echo hi\" execs per second)",
        size: 11,
        fill: "#555"
      ),
      line(left, top, left, top + plot_h, "#888"),
      bars
    ])
  end

  # -- primitives -------------------------------------------------------------

  defp legend(x0, y, impls) do
    {items, _} =
      Enum.map_reduce(impls, x0, fn impl, x ->
        label = @labels[impl]

        {[rect(x, y - 10, 12, 12, @colors[impl]), text(x + 16, y, label, size: 12)],
         x + 30 + String.length(label) * 7}
      end)

    items
  end

  defp svg(w, h, body) do
    [
      ~s|<svg xmlns="http://www.w3.org/2000/svg" width="#{r(w)}" height="#{r(h)}" viewBox="0 0 #{r(w)} #{r(h)}" font-family="Helvetica, Arial, sans-serif">\n|,
      ~s|<rect width="100%" height="100%" fill="white"/>\n|,
      body,
      "</svg>\n"
    ]
    |> IO.iodata_to_binary()
  end

  defp rect(x, y, w, h, fill),
    do: ~s|<rect x="#{r(x)}" y="#{r(y)}" width="#{r(w)}" height="#{r(h)}" fill="#{fill}"/>\n|

  defp line(x1, y1, x2, y2, stroke),
    do:
      ~s|<line x1="#{r(x1)}" y1="#{r(y1)}" x2="#{r(x2)}" y2="#{r(y2)}" stroke="#{stroke}" stroke-width="1"/>\n|

  defp text(x, y, content, opts) do
    anchor = Keyword.get(opts, :anchor, "start")
    size = Keyword.get(opts, :size, 12)
    fill = Keyword.get(opts, :fill, "#111")
    weight = Keyword.get(opts, :weight, "normal")

    ~s|<text x="#{r(x)}" y="#{r(y)}" font-size="#{size}" text-anchor="#{anchor}" fill="#{fill}" font-weight="#{weight}">#{escape(content)}</text>\n|
  end

  defp escape(s),
    do:
      s
      |> to_string()
      |> String.replace("&", "&amp;")
      |> String.replace("<", "&lt;")
      |> String.replace(">", "&gt;")

  defp r(v) when is_integer(v), do: Integer.to_string(v)
  defp r(v), do: :erlang.float_to_binary(v / 1, decimals: 1)

  defp decade_label(ns) do
    Enum.find_value([{1.0e9, "s"}, {1.0e6, "ms"}, {1.0e3, "µs"}, {1.0, "ns"}], fn {unit, name} ->
      if ns >= unit, do: "#{round(ns / unit)} #{name}"
    end)
  end

  defp decade_floor(v), do: :math.pow(10, :math.floor(:math.log10(max(v, 1))))
  defp decade_ceil(v), do: :math.pow(10, :math.ceil(:math.log10(max(v, 1)) + 0.0001))

  defp decades(lo, hi) do
    Stream.iterate(lo, &(&1 * 10)) |> Enum.take_while(&(&1 <= hi * 1.0001))
  end

  defp nice_ceil(v) do
    mag = :math.pow(10, :math.floor(:math.log10(max(v, 1))))
    step = Enum.find([1, 2, 2.5, 5, 10], fn s -> s * mag >= v end)
    step * mag
  end

  defp short(v) when v >= 1_000, do: "#{round(v / 1000)}k"
  defp short(v), do: "#{round(v)}"
end

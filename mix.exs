# The native compiler must exist before `lib/` compiles (it runs first).
Code.require_file("build_support/compile_native.ex", __DIR__)

defmodule ExBashkit.MixProject do
  use Mix.Project

  @version "0.1.0"

  def project do
    [
      app: :ex_bashkit,
      version: @version,
      elixir: "~> 1.14",
      compilers: [:ex_bashkit_native] ++ Mix.compilers(),
      elixirc_paths: elixirc_paths(Mix.env()),
      start_permanent: Mix.env() == :prod,
      deps: [],
      description: "A safe, stateful, in-process bash sandbox for the BEAM (bashkit NIF).",
      package: package(),
      aliases: aliases(),
      # PropEr (Debian's erlang-proper) is a test-only requirement, called from
      # test/support; it is not a runtime dependency of the library.
      xref: [exclude: [:proper, :proper_types, :proper_gen, :proper_unicode]]
    ]
  end

  def application do
    [mod: {ExBashkit.Application, []}, extra_applications: [:logger]]
  end

  defp elixirc_paths(:test), do: ["lib", "test/support"]
  defp elixirc_paths(_), do: ["lib"]

  defp package do
    [
      licenses: ["MIT"],
      files: ~w(lib build_support native/ex_bashkit/src native/ex_bashkit/Cargo.*
                priv/native/.gitkeep checksum-Elixir.ExBashkit.Native.exs mix.exs README.md)
    ]
  end

  defp aliases do
    [example: ["run examples/session_tour.exs"]]
  end
end

# The native compiler must exist before `lib/` compiles (it runs first); the
# other build_support/ files are its helpers and the packaging tasks.
for file <- Path.wildcard(Path.join(__DIR__, "build_support/*.ex")), do: Code.require_file(file)

defmodule ExBashkit.MixProject do
  use Mix.Project

  @version "0.1.0"
  # Precompiled artifacts are downloaded from this repository's releases.
  @source_url "https://github.com/ex-bashkit/ex_bashkit"

  def project do
    [
      app: :ex_bashkit,
      version: @version,
      source_url: @source_url,
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
      # :ssl / :public_key: the test HTTPS server (test/support), likewise.
      # :mnesia: only ExBashkit.Store.Mnesia calls it, and starts it itself.
      xref: [
        exclude: [
          :proper,
          :proper_types,
          :proper_gen,
          :proper_unicode,
          :ssl,
          :public_key,
          :mnesia
        ]
      ]
    ]
  end

  def application do
    [mod: {ExBashkit.Application, []}, extra_applications: [:logger, :crypto]]
  end

  defp elixirc_paths(:test), do: ["lib", "test/support"]
  defp elixirc_paths(_), do: ["lib"]

  defp package do
    [
      # The Hex name `ex_bashkit` belongs to another package (see README.md).
      name: "bashkit_ex",
      licenses: ["MIT"],
      links: %{"GitHub" => @source_url},
      files:
        ~w(lib build_support native/ex_bashkit/src native/ex_bashkit/Cargo.*
                priv/native/.gitkeep checksum-Elixir.ExBashkit.Native.exs mix.exs README.md LICENSE CHANGELOG.md)
    ]
  end

  defp aliases do
    [example: ["run examples/session_tour.exs"]]
  end
end

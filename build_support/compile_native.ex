defmodule Mix.Tasks.Compile.ExBashkitNative do
  @moduledoc """
  Puts the native parts of ExBashkit into `priv/native/`: downloaded
  precompiled, or built from source with cargo.

  This is the project's own replacement for the `rustler` and
  `rustler_precompiled` Mix packages (Hex is not available where the project
  is built). It lives outside `lib/` because a compiler listed in
  `compilers:` must exist before `lib/` is compiled.

  - Default: when `checksum-Elixir.ExBashkit.Native.exs` has an entry for
    this version, target and NIF version, the artifact is downloaded from
    `EX_BASHKIT_BASE_URL` (default: the version's GitHub release), verified,
    cached (`EX_BASHKIT_CACHE_DIR`) and unpacked: no Rust toolchain needed
    (`ExBashkit.Build.Precompiled`). A checksum mismatch is a compile error.
  - No entry, or the server cannot be reached: build from source when cargo
    is on PATH, otherwise fail with a message that names both ways out.
  - `EX_BASHKIT_BUILD=1` always builds from source (`cargo build --release`
    on every compile; a no-op build takes ~0.1 s). `EX_BASHKIT_CARGO_PROFILE`
    picks another cargo profile: `debug` (faster to build), or `dist` (thin
    LTO, as the precompiled artifacts are built: slow to build, about 3 µs
    faster per exec).
  - Files are installed only when their content changed
    (`ExBashkit.Build.Install`).
  """

  use Mix.Task.Compiler

  alias ExBashkit.Build.{Install, Precompiled, SourceBuild}

  @native_dir "priv/native"

  @impl true
  def run(_args) do
    if force_build?() do
      build_from_source!(
        System.find_executable("cargo") ||
          Mix.raise(
            "EX_BASHKIT_BUILD is set but cargo is not on PATH: install Rust (cargo >= 1.91), " <>
              "or unset EX_BASHKIT_BUILD to use the precompiled artifact"
          )
      )
    else
      case Precompiled.install(Precompiled.config()) do
        {:ok, %{artifact: name, source: source, written: written}} ->
          if written != [] do
            Mix.shell().info("ex_bashkit: installed #{name} (sha256 verified, from #{source})")
          end

        {:unavailable, why} ->
          fallback(why)
      end
    end

    # priv/ may not have existed when Mix linked _build/<env>/lib/ex_bashkit.
    Mix.Project.build_structure()
    {:ok, []}
  end

  defp force_build? do
    System.get_env("EX_BASHKIT_BUILD", "") not in ["", "0", "false"]
  end

  defp fallback(why) do
    case System.find_executable("cargo") do
      nil ->
        Mix.raise(no_way_message(why))

      cargo ->
        unless why.quiet,
          do: Mix.shell().info("ex_bashkit: #{why.reason}; building from source with cargo")

        build_from_source!(cargo)
    end
  end

  defp no_way_message(why) do
    artifact = if why.artifact, do: " (#{why.artifact})", else: ""

    """
    ex_bashkit: no native library for this machine#{artifact}: #{why.reason}.
    Two ways out:
      1. Use the precompiled artifact: it must be listed in
         checksum-Elixir.ExBashkit.Native.exs and downloadable from
         EX_BASHKIT_BASE_URL (set it to a mirror that has it#{if why.url, do: "; tried #{why.url}", else: ""}).
      2. Build from source: install Rust (cargo >= 1.91, https://rustup.rs) so
         that cargo is on PATH, and compile again (EX_BASHKIT_BUILD=1 forces it).
    """
  end

  defp build_from_source!(cargo) do
    profile = System.get_env("EX_BASHKIT_CARGO_PROFILE", "release")
    files = SourceBuild.build!(cargo: cargo, profile: profile)
    Install.install!(@native_dir, for({name, path} <- files, do: {name, File.read!(path)}))
  end
end

defmodule ExBashkit.Test.FreshProject do
  @moduledoc false
  # A fresh copy of this project's sources in a temporary directory (mix.exs,
  # config/, lib/, build_support/, the crate's Cargo.toml/Cargo.lock/src, priv/native/.gitkeep;
  # never a cargo target dir or a _build), and `mix` run in it as a separate
  # OS process, the way a user's machine compiles the package.
  #
  #     dir = FreshProject.copy!(root)
  #     {output, status} = FreshProject.mix(dir, ["compile"], env: [...], path: path)
  #
  # Every run is bounded: past its timeout the mix process is killed and the
  # status is `:timeout`.

  @sources ~w(mix.exs config lib build_support native/ex_bashkit/Cargo.toml
              native/ex_bashkit/Cargo.lock native/ex_bashkit/src priv/native/.gitkeep)

  # Variables of the test run that must not leak into the fresh project's
  # build (a forced source build, build paths of this checkout, proxies).
  @unset ~w(EX_BASHKIT_BUILD EX_BASHKIT_BASE_URL EX_BASHKIT_CACHE_DIR EX_BASHKIT_CARGO_PROFILE
            CARGO_TARGET_DIR MIX_BUILD_PATH MIX_BUILD_ROOT MIX_DEPS_PATH MIX_EXS MIX_LOCKFILE
            MIX_TARGET EX_BASHKIT_ISOLATION HTTP_PROXY HTTPS_PROXY http_proxy https_proxy)

  @doc "Copies the project's sources from `root` into a new temporary directory."
  def copy!(root) do
    dir = Path.join(System.tmp_dir!(), "ex_bashkit_fresh_#{System.unique_integer([:positive])}")

    for source <- @sources do
      dest = Path.join(dir, source)
      File.mkdir_p!(Path.dirname(dest))
      File.cp_r!(Path.join(root, source), dest)
    end

    dir
  end

  @doc """
  A PATH with no `cargo` on it: the current PATH, where each directory that
  holds a cargo is replaced by a mirror of it (symlinks) without cargo, so
  that whatever else lives there (/usr/bin on a merged-/usr system with
  Debian's cargo) stays reachable.
  """
  def path_without_cargo(scratch) do
    System.get_env("PATH", "")
    |> String.split(":", trim: true)
    |> Enum.with_index()
    |> Enum.map_join(":", fn {dir, i} ->
      if File.exists?(Path.join(dir, "cargo")),
        do: mirror_without_cargo(dir, scratch, i),
        else: dir
    end)
  end

  defp mirror_without_cargo(dir, scratch, i) do
    mirror = Path.join(scratch, "path-#{i}-without-cargo")
    File.rm_rf!(mirror)
    File.mkdir_p!(mirror)

    for name <- File.ls!(dir),
        name != "cargo",
        do: File.ln_s!(Path.join(dir, name), Path.join(mirror, name))

    mirror
  end

  @doc """
  Runs `mix args` in `dir`; returns `{output, exit_status | :timeout}`.
  Options: `:env` (`[{name, value | nil}]`, nil unsets), `:path` (PATH),
  `:mix_env` (default `"prod"`), `:timeout` (ms, default 180 s).
  """
  def mix(dir, args, opts \\ []) do
    mix = System.find_executable("mix") || raise "mix not on PATH"

    given =
      [{"MIX_ENV", Keyword.get(opts, :mix_env, "prod")}] ++
        if(opts[:path], do: [{"PATH", opts[:path]}], else: []) ++
        Keyword.get(opts, :env, [])

    env = for(name <- @unset, not List.keymember?(given, name, 0), do: {name, nil}) ++ given

    port =
      Port.open({:spawn_executable, mix}, [
        :binary,
        :exit_status,
        :stderr_to_stdout,
        args: args,
        cd: dir,
        env:
          for(
            {k, v} <- env,
            do: {String.to_charlist(k), if(v, do: String.to_charlist(v), else: false)}
          )
      ])

    {:os_pid, os_pid} = Port.info(port, :os_pid)
    deadline = System.monotonic_time(:millisecond) + Keyword.get(opts, :timeout, 180_000)
    collect(port, os_pid, deadline, [])
  end

  defp collect(port, os_pid, deadline, acc) do
    left = max(deadline - System.monotonic_time(:millisecond), 0)

    receive do
      {^port, {:data, data}} -> collect(port, os_pid, deadline, [acc | data])
      {^port, {:exit_status, status}} -> {IO.iodata_to_binary(acc), status}
    after
      left ->
        System.cmd("kill", ["-9", Integer.to_string(os_pid)])

        try do
          Port.close(port)
        rescue
          ArgumentError -> :ok
        end

        {IO.iodata_to_binary(acc), :timeout}
    end
  end
end

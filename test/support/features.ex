defmodule ExBashkit.Test.Features do
  @moduledoc false
  # Which spec'd features this build has, so the parts of the security and
  # reliability suite written against a feature that is still being built are
  # skipped cleanly instead of failing:
  #
  #     @moduletag skip: ExBashkit.Test.Features.missing(:snapshot)
  #
  # `missing/1` returns `false` (run) or a reason string (skip). Each probe
  # uses the public API the spec describes, the way a user would; the answer
  # is computed once per VM and cached.

  alias ExBashkit.Session

  @features [:mounts, :builtins, :virtual_fs, :snapshot]

  @doc "`false` when `feature` works in this build, else a skip reason."
  @spec missing(atom()) :: false | String.t()
  def missing(feature) when feature in @features do
    if available?(feature),
      do: false,
      else: "#{feature} is not in this build yet (spec'd; these tests light up after the merge)"
  end

  @doc "Whether `feature` works in this build."
  @spec available?(atom()) :: boolean()
  def available?(feature) when feature in @features do
    key = {__MODULE__, feature}

    case :persistent_term.get(key, :unknown) do
      :unknown ->
        value = probe(feature)
        :persistent_term.put(key, value)
        value

      value ->
        value
    end
  end

  defp probe(:snapshot) do
    Code.ensure_loaded?(Session) and function_exported?(Session, :snapshot, 2) and
      function_exported?(Session, :restore, 3)
  end

  defp probe(:mounts) do
    dir = Path.join(System.tmp_dir!(), "ex_bashkit_probe_#{System.unique_integer([:positive])}")
    File.mkdir_p!(dir)
    File.write!(Path.join(dir, "marker"), "mounted")

    try do
      run(fn ->
        s = Session.new(mounts: [{"/probe", dir, :read_only}])
        Session.read_file(s, "/probe/marker") == {:ok, "mounted"}
      end)
    after
      File.rm_rf!(dir)
    end
  end

  defp probe(:builtins) do
    run(fn ->
      s = Session.new(builtins: %{"exbk_probe" => fn _ -> {:ok, "yes\n"} end})
      match?({:ok, %{stdout: "yes\n"}}, Session.exec(s, "exbk_probe"))
    end)
  end

  defp probe(:virtual_fs) do
    # The behaviour module is part of the spec'd API.
    Code.ensure_loaded?(ExBashkit.VirtualFs) and
      run(fn ->
        s =
          Session.new(
            virtual_fs: %{
              "/vprobe" => fn
                %{op: :read} -> {:ok, "yes\n"}
                _ -> {:error, :enotsup}
              end
            }
          )

        match?({:ok, %{stdout: "yes\n"}}, Session.exec(s, "cat /vprobe/x"))
      end)
  end

  # A probe that raises, hangs or answers anything but `true` means "missing".
  defp run(fun) do
    task =
      Task.async(fn ->
        try do
          fun.() == true
        rescue
          _ -> false
        end
      end)

    case Task.yield(task, 10_000) || Task.shutdown(task, :brutal_kill) do
      {:ok, value} -> value
      _ -> false
    end
  end
end

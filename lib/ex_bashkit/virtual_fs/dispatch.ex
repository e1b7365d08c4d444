defmodule ExBashkit.VirtualFs.Dispatch do
  @moduledoc false
  # Calling a `:virtual_fs` backend with one request, whatever its form:
  # a 1-arity function (the request map), a module with the per-operation
  # callbacks of `ExBashkit.VirtualFs` (`{module, arg}` or bare `module`,
  # arg nil), or a module of the earlier single `handle/2` contract.

  @callbacks [read: 2, write: 3, append: 3, mkdir: 3, remove: 3, rename: 3, list: 2, stat: 2]

  @doc false
  # Whether `module` (loaded) serves requests through either contract.
  @spec implemented?(module()) :: boolean()
  def implemented?(module) do
    function_exported?(module, :handle, 2) or
      Enum.any?(@callbacks, fn {name, arity} -> function_exported?(module, name, arity) end)
  end

  @doc false
  # The backend's raw answer to `request` (`%{op: ..., path: ...}` plus the
  # op's extra key); the caller validates it.
  @spec call(term(), map()) :: term()
  def call(fun, request) when is_function(fun, 1), do: fun.(request)
  def call({module, arg}, request), do: call_module(module, arg, request)
  def call(module, request) when is_atom(module), do: call_module(module, nil, request)

  defp call_module(module, arg, request) do
    if function_exported?(module, :handle, 2) do
      module.handle(request, arg)
    else
      {name, args} = callback(request)

      if function_exported?(module, name, length(args) + 1),
        do: apply(module, name, [arg | args]),
        else: {:error, :enotsup}
    end
  end

  defp callback(%{op: :read, path: path}), do: {:read, [path]}
  defp callback(%{op: :write, path: path, content: data}), do: {:write, [path, data]}
  defp callback(%{op: :append, path: path, content: data}), do: {:append, [path, data]}
  defp callback(%{op: :mkdir, path: path, parents: flag}), do: {:mkdir, [path, flag]}
  defp callback(%{op: :remove, path: path, recursive: flag}), do: {:remove, [path, flag]}
  defp callback(%{op: :rename, path: path, to: to}), do: {:rename, [path, to]}
  defp callback(%{op: :list, path: path}), do: {:list, [path]}
  defp callback(%{op: :stat, path: path}), do: {:stat, [path]}
end

def save(graph, path, *, inputs, outputs, input_names=None, output_names=None, opset=17):
    raise NotImplementedError
